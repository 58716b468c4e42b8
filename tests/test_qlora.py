"""QLoRA (model.quantization): checked at startup on any machine; trained on a GPU (bitsandbytes)."""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest

LORA = "model.lora={r: 8, alpha: 16, dropout: 0.0, target_modules: [q_proj, v_proj]}"


@pytest.mark.parametrize(
    "overrides, named",
    [
        (["model=qwen2.5-7b", "model.quantization=4bit"], "add LoRA adapters (model.lora"),
        (["model=qwen2.5-7b", "model.quantization=3bit", LORA], "expected one of 4bit, 8bit or null"),
        (["model.quantization=8bit", LORA], "model=tiny-qwen2 is built in memory"),
    ],
)
def test_a_quantized_model_config_is_refused_at_startup_naming_why(compose, overrides, named, refused_at_startup):
    message = refused_at_startup(compose, *overrides)
    assert "model.quantization=" in message and named in message


def test_without_bitsandbytes_the_error_says_what_to_install(compose, monkeypatch, refused_at_startup):
    import rpbench.models.quantization as quantization

    monkeypatch.setattr(quantization, "find_spec", lambda name: None if name == "bitsandbytes" else find_spec(name))
    message = refused_at_startup(compose, "model=qwen2.5-7b", "model.quantization=4bit", LORA)
    assert 'pip install -e ".[qlora]"' in message


@pytest.mark.gpu
@pytest.mark.parametrize("bits", ["4bit", "8bit"])
def test_qlora_trains_the_adapters_of_a_quantized_model(tmp_path, bits, tiny_model, run, fast):
    from rpbench.models import load

    model, tokenizer = load(tiny_model())
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    out = tmp_path / bits
    result = run(
        f"hydra.run.dir={out}",
        *fast,
        f"model.name_or_path={tmp_path / 'base'}",
        "model.family=qwen2",
        f"model.quantization={bits}",
        LORA,
        "objective.lr=1e-3",
        "trainer=gpu",
        "trainer.devices=1",
        "logger=none",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    held_out = json.loads((out / "metrics.json").read_text())["train"]["held_out"]
    assert held_out["after"]["loss"] < held_out["before"]["loss"]
