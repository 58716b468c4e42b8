"""The Gemma-2 family: its system turn folded into the first user turn, softcapped logits and attention, and
one SFT step of tiny-gemma2 through the composed config."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.collate import pad_collate
from rpbench.data.records import SFTExample, Turn, as_messages
from rpbench.models import chat_renderer, load
from rpbench.models.forward import model_inputs, sequence_logps
from rpbench.training import train
from rpbench.validate import validate

EOT = "<end_of_turn>"


@pytest.fixture(scope="module")
def model_cfg(tiny_settings):
    """tiny-gemma2's settings, eager attention (the one that keeps Gemma-2's attention softcap)."""
    return tiny_settings("gemma2", attn_implementation="eager", end_of_turn=EOT)


SYSTEM, USER, REPLY = "You are Greta, an innkeeper.", "Hello! Who are you?", "Greta Holm, at your service."
MULTI = [
    Turn("system", SYSTEM),
    Turn("user", USER),
    Turn("assistant", REPLY),
    Turn("user", "Any soup left?"),
    Turn("assistant", "Always, for a tired traveller."),
]


@pytest.fixture(scope="module")
def tiny(model_cfg):
    return load(model_cfg)


def test_the_system_turn_is_folded_into_the_first_user_turn_token_by_token(tiny, model_cfg):
    """Expected: Gemma-2's chat format, written out, with the system text, a blank line, then the user's."""
    _, tok = tiny
    rendered = chat_renderer(model_cfg, tok, 512).render_conversation(MULTI)
    pieces = [  # (text, supervised)
        ("<bos>", False),
        (f"<start_of_turn>user\n{SYSTEM}\n\n{USER}{EOT}\n<start_of_turn>model\n", False),
        (f"{REPLY}{EOT}", True),
        (f"\n<start_of_turn>user\nAny soup left?{EOT}\n<start_of_turn>model\n", False),
        (f"Always, for a tired traveller.{EOT}", True),
        ("\n", False),
    ]
    expected_ids, expected_labels = [], []
    for text, supervised in pieces:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        expected_ids += ids
        expected_labels += ids if supervised else [IGNORE_INDEX] * len(ids)
    assert rendered.input_ids == expected_ids
    assert rendered.labels == expected_labels
    bos, start, end = tok.convert_tokens_to_ids(["<bos>", "<start_of_turn>", EOT])  # single special tokens
    assert rendered.input_ids[:2] == [bos, start] and rendered.input_ids.count(start) == 4
    assert [i for i, label in enumerate(rendered.labels) if label == end] == [
        i for i, token in enumerate(rendered.input_ids) if token == end
    ][1::2]  # of the four turn ends, the model turns' are supervised


def test_the_template_itself_refuses_a_system_turn_and_a_lone_system_turn_becomes_a_user_turn(tiny, model_cfg):
    _, tok = tiny
    with pytest.raises(Exception, match="only user and assistant turns are allowed, got system"):
        tok.apply_chat_template(as_messages(MULTI[:3]), tokenize=False)
    prompt = chat_renderer(model_cfg, tok, 512).render_prompt([Turn("system", SYSTEM), Turn("assistant", REPLY)])
    assert tok.decode(prompt) == (
        f"<bos><start_of_turn>user\n{SYSTEM}{EOT}\n<start_of_turn>model\n{REPLY}{EOT}\n<start_of_turn>model\n"
    )


def hf_logps(model, batch) -> torch.Tensor:
    """Summed label log-probs per row from the model's own forward (Gemma2ForCausalLM caps its logits)."""
    logits = model(**model_inputs(batch, "eager")).logits[:, :-1].float()
    targets = batch["labels"][:, 1:]
    logps = logits.log_softmax(-1).gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    return (logps * (targets != IGNORE_INDEX)).sum(-1)


def test_our_log_probs_are_those_of_the_softcapped_model(tiny, model_cfg):
    _, tok = tiny
    # caps small enough to change a random tiny model's logits and (sharpened) attention scores a lot
    model, _ = load(
        replace(model_cfg, tiny={**model_cfg.tiny, "final_logit_softcapping": 0.5, "attn_logit_softcapping": 1.0})
    )
    renderer = chat_renderer(model_cfg, tok, 512)
    batch = pad_collate([renderer.render_conversation(MULTI[:k]).as_sample() for k in (3, 5)], tok.pad_token_id)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(30.0)
        ours, _ = sequence_logps(model.eval(), batch)
        torch.testing.assert_close(ours, hf_logps(model, batch), atol=1e-4, rtol=1e-5)
        model.config.final_logit_softcapping = None
        uncapped = hf_logps(model, batch)
        for layer in model.model.layers:  # each attention module keeps its cap from the config it was built with
            layer.self_attn.attn_logit_softcapping = None
        attention_uncapped = hf_logps(model, batch)
    assert (ours - uncapped).abs().min() > 0.1  # the cap mattered: a path that skipped it would fail above
    assert (uncapped - attention_uncapped).abs().min() > 1e-3  # and so did the attention cap eager applies


def test_sdpa_which_drops_the_attention_cap_is_refused(model_cfg):
    with pytest.raises(ValueError, match="attn_implementation=eager"):
        load(replace(model_cfg, attn_implementation="sdpa"))


def test_tiny_gemma2_trains_an_sft_step_from_the_composed_config(compose, tmp_path):
    cfg = compose(
        "model=tiny-gemma2",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "trainer.max_steps=1",
        "objective.batch_size=2",
        "objective.grad_accum=1",
        "objective.warmup_ratio=0",  # else the one step's learning rate is 0
        "save_model=false",
    )
    assert (cfg.model.family, cfg.model.attn_implementation, cfg.objective.lr) == ("gemma2", "eager", 5e-3)
    model, tok = load(validate(cfg).model)
    examples = [SFTExample("ex0", tuple(MULTI[:3])), SFTExample("ex1", tuple(MULTI))]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    report = train(validate(cfg).training, model, tok, examples, examples, tmp_path / "run", logger=None)
    assert report["optimizer_steps"] == 1
    assert report["held_out"]["after"]["loss"] < report["held_out"]["before"]["loss"]
    assert all(not torch.equal(before[name], p) for name, p in model.named_parameters() if p.requires_grad)
