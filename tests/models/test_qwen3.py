"""The Qwen3 family: its training-safe chat templates, supervision masks, SFT and generation on tiny-qwen3."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.records import SFTExample, Turn, as_messages, reasoning_target
from rpbench.models import load
from rpbench.models.chat_templates import load_chat_template
from rpbench.training import train
from rpbench.validate import validate

EOT = "<|im_end|>"


@pytest.fixture(scope="module")
def model_cfg(tiny_settings):
    """tiny-qwen3's settings."""
    return tiny_settings("qwen3", end_of_turn=EOT)


EMPTY_THINK = "<think>\n\n</think>\n\n"
SYSTEM, USER, REPLY = "You are Greta, an innkeeper.", "Hello! Who are you?", "Greta Holm, at your service."
TURNS = [Turn("system", SYSTEM), Turn("user", USER), Turn("assistant", REPLY)]
MULTI = [*TURNS, Turn("user", "Any soup left?"), Turn("assistant", "Always, for a tired traveller.")]


@pytest.fixture(scope="module")
def tiny(model_cfg):
    return load(model_cfg)


def supervised_spans(rendered) -> list[list[int]]:
    """The runs of supervised token ids, in order."""
    spans: list[list[int]] = []
    previous = IGNORE_INDEX
    for token, label in zip(rendered.input_ids, rendered.labels, strict=True):
        if label != IGNORE_INDEX:
            if previous == IGNORE_INDEX:
                spans.append([])
            spans[-1].append(token)
        previous = label
    return spans


def test_qwen3_template_renders_a_final_turn_and_the_generation_prompt_as_qwen3_does(tiny):
    """Expected strings: Qwen3's own template (Qwen/Qwen3-4B tokenizer_config.json) with enable_thinking=false."""
    _, tok = tiny
    prompt = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n"
    generation_prompt = tok.apply_chat_template(as_messages(TURNS[:2]), tokenize=False, add_generation_prompt=True)
    assert generation_prompt == f"{prompt}<|im_start|>assistant\n{EMPTY_THINK}"  # no default system prompt either
    conversation = tok.apply_chat_template(as_messages(TURNS), tokenize=False)
    assert conversation == f"{prompt}<|im_start|>assistant\n{EMPTY_THINK}{REPLY}<|im_end|>\n"
    assert tok.convert_tokens_to_ids(["<think>", "</think>"]) == [len(tok) - 2, len(tok) - 1]  # single tokens


def test_tiny_qwen3_supervises_only_assistant_contents_and_end_of_turn(tiny):
    model, tok = tiny
    rendered = ChatRenderer(tok, EOT, 512).render_conversation(MULTI)
    spans = [tok.decode(span) for span in supervised_spans(rendered)]
    assert spans == [f"{REPLY}{EOT}", f"Always, for a tired traveller.{EOT}"]
    first_reply = ChatRenderer(tok, EOT, 512).render_conversation(MULTI[:3])
    assert rendered.input_ids[: len(first_reply.input_ids)] == first_reply.input_ids  # prefix-stable
    prompt = ChatRenderer(tok, EOT, 512).render_prompt(MULTI[:4])
    assert rendered.input_ids[: len(prompt)] == prompt  # the last reply's prompt is the generation prompt
    assert model.config.vocab_size == len(tok) and model.config.head_dim == 16
    assert tok.convert_tokens_to_ids(EOT) in model.generation_config.eos_token_id  # generation stops there


def test_qwen3_template_refuses_a_think_block_and_points_to_the_thinking_one(tiny):
    _, tok = tiny
    with pytest.raises(Exception, match="qwen3-thinking"):
        tok.apply_chat_template(as_messages([*TURNS[:2], Turn("assistant", reasoning_target("r", REPLY))]))


def test_thinking_template_supervises_the_reasoning_then_the_reply(tiny, model_cfg):
    _, tok = tiny
    thinking = load(replace(model_cfg, chat_template="qwen3-thinking"))[1]
    target = reasoning_target("She greets a guest: be warm and give her name.", REPLY)
    assert target == f"<think>\nShe greets a guest: be warm and give her name.\n</think>\n\n{REPLY}"
    renderer = ChatRenderer(thinking, EOT, 512)
    rendered = renderer.render_conversation([*MULTI[:4], Turn("assistant", target)])
    spans = [thinking.decode(span) for span in supervised_spans(rendered)]
    assert spans == [f"{REPLY}{EOT}", f"{target}{EOT}"]  # history turns carry no reasoning, as in Qwen3's
    assert thinking.decode(renderer.render_prompt(MULTI[:4])).endswith("<|im_start|>assistant\n")
    assert thinking.chat_template == load_chat_template("qwen3-thinking") != tok.chat_template


@pytest.mark.slow
def test_tiny_qwen3_learns_replies_and_generation_stops_at_end_of_turn(compose, tmp_path, generate_texts):
    examples = [
        SFTExample(f"ex{i}", (Turn("system", SYSTEM), Turn("user", question), Turn("assistant", answer)))
        for i, (question, answer) in enumerate([(USER, REPLY), ("Any soup left?", "Always, for a tired traveller.")])
    ]
    cfg = compose(
        "model=tiny-qwen3",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "objective.epochs=30",
        "objective.lr=1e-2",
        "objective.batch_size=2",
        "objective.grad_accum=1",
        "objective.warmup_ratio=0",
        "objective.scheduler=constant",
        "save_model=false",
    )
    model, tok = load(validate(cfg).model)
    report = train(validate(cfg).training, model, tok, examples, examples, tmp_path / "run", logger=None)
    assert report["optimizer_steps"] == 30
    assert report["held_out"]["after"]["loss"] < 0.1 * report["held_out"]["before"]["loss"]
    model.eval()
    prompts = [as_messages(example.turns[:-1]) for example in examples]
    # 40 new tokens is far more than a reply: had generation not stopped at <|im_end|>, more text would follow.
    assert generate_texts(model, tok, prompts, max_new_tokens=40) == [REPLY, "Always, for a tired traveller."]
