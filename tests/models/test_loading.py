"""Model factory: tiny models, LoRA, gradient checkpointing, HF export, offline errors."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rpbench.data.chat import ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.data.records import Turn
from rpbench.models import end_of_turn_ids, load, save_hf
from rpbench.models.families.qwen2 import Qwen2
from rpbench.models.forward import supervised_nll_sum
from rpbench.models.loading import load_tokenizer

TURNS = [Turn("system", "You are Holmes."), Turn("user", "Who are you?"), Turn("assistant", "A detective.")]


def batch_for(tokenizer, eot: str) -> dict:
    rendered = ChatRenderer(tokenizer, eot, 256).render_conversation(TURNS)
    return pad_collate([rendered.as_sample()], tokenizer.pad_token_id)


@pytest.mark.parametrize(("family", "eot"), [("qwen2", "<|im_end|>"), ("llama", "<|eot_id|>")])
def test_tiny_models_stop_at_their_end_of_turn_token(family, eot, tiny_model):
    cfg = tiny_model(family, end_of_turn=eot)
    model, tokenizer = load(cfg)
    assert tokenizer.convert_tokens_to_ids(eot) in model.generation_config.eos_token_id
    assert end_of_turn_ids(cfg, tokenizer)[0] == tokenizer.convert_tokens_to_ids(eot)
    assert model.config.vocab_size == len(tokenizer)


def test_lora_trains_only_the_adapters_and_exports_a_merged_model(tmp_path, tiny_model):
    cfg = tiny_model(end_of_turn="<|im_end|>", lora={"r": 4, "alpha": 8, "dropout": 0.0})
    model, tokenizer = load(cfg)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n in trainable if ".lora_A" in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj"} == set(Qwen2.lora_target_modules)  # the family's
    with torch.no_grad():  # make the adapters matter so merging is observable
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)
    batch = batch_for(tokenizer, "<|im_end|>")
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    out = save_hf(model, tokenizer, tmp_path / "model")
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        got = reloaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert AutoTokenizer.from_pretrained(out).chat_template == tokenizer.chat_template


def test_gradient_checkpointing_gives_the_same_gradients(tiny_model):
    grads = []
    for checkpointing in (False, True):
        model, tokenizer = load(tiny_model("llama", end_of_turn="<|eot_id|>", gradient_checkpointing=checkpointing))
        model.train()
        nll, _ = supervised_nll_sum(model, batch_for(tokenizer, "<|eot_id|>"))
        nll.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert model.is_activation_checkpointing
    torch.testing.assert_close(grads[0], grads[1])


def test_an_unreachable_hub_model_says_what_to_do(monkeypatch, tiny_model):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read once, at import
    with pytest.raises(OSError, match=r"model.name_or_path=<dir>"):
        load(tiny_model(name_or_path="Qwen/Qwen2.5-7B-not-in-cache"))


def test_an_end_of_turn_that_is_no_single_token_stops_at_the_tokenizer_before_any_weights(tiny_model):
    """As a Llama-3 config pointed at a ChatML model: load_tokenizer (no weights read) already refuses it."""
    with pytest.raises(ValueError, match=r"model\.end_of_turn='<\|eot_id\|>' is not a single token of 'tiny:qwen2'"):
        load_tokenizer(tiny_model(end_of_turn="<|eot_id|>"))
