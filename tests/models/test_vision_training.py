"""Tiny Qwen2-VL in training: image inputs through the backbone, padding-invariant losses, a frozen or
trained vision tower, LoRA on the language model only, and an export that reloads with its processor."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch
from PIL import Image

from rpbench.data.collate import pad_collate
from rpbench.data.records import PreferenceExample, Turn
from rpbench.models import chat_renderer, load, save_hf
from rpbench.models.config_tree import compose_model_config
from rpbench.models.families.qwen2_vl import Qwen2VL
from rpbench.models.forward import sequence_logps
from rpbench.models.settings import LoraSettings, ModelSettings
from rpbench.models.vision import ImageTextTokenizer
from rpbench.objectives.dpo import DPOModule
from rpbench.training.fit import log_parameters, with_image_inputs

MODEL_CFG = compose_model_config("tiny-qwen2-vl")
SYSTEM = Turn("system", "You are Monica Geller.")


def model_cfg(**overrides) -> ModelSettings:
    return replace(MODEL_CFG, **overrides)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("images")
    generator = torch.Generator().manual_seed(0)
    paths = []
    for name, size in (("a.png", (56, 56)), ("b.png", (112, 84)), ("c.png", (84, 112))):
        pixels = (torch.rand(size[1], size[0], 3, generator=generator) * 255).to(torch.uint8).numpy()
        Image.fromarray(pixels).save(folder / name)
        paths.append(str(folder / name))
    return paths


@pytest.fixture(scope="module")
def vl():
    return load(model_cfg())


def samples(tokenizer, images) -> list[dict]:
    a, b, c = images
    conversations = [
        [SYSTEM, Turn("user", "What is this?", image=a), Turn("assistant", "A kitchen, spotless.")],
        [
            Turn("user", "Look.", image=b),
            Turn("assistant", "Messy!"),
            Turn("user", "And now?", image=c),
            Turn("assistant", "Much messier. I need to clean it right away."),
        ],
        [SYSTEM, Turn("user", "Just text here."), Turn("assistant", "Fine by me.")],
    ]
    renderer = chat_renderer(MODEL_CFG, tokenizer, 4096)
    return [renderer.render_conversation(turns).as_sample() for turns in conversations]


def batch_of(tokenizer, rows: list[dict], padding_side: str = "right") -> dict:
    collate = partial(pad_collate, pad_token_id=tokenizer.pad_token_id, padding_side=padding_side)
    return with_image_inputs(collate, tokenizer)(rows)


def hf_logps(model, batch: dict) -> torch.Tensor:
    """Summed log-probs of a one-row batch's labels from the model's own forward (its own M-RoPE positions)."""
    images = {key: batch[key] for key in Qwen2VL.image_inputs if key in batch}
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **images).logits
    targets = batch["labels"][0, 1:]
    kept = targets != -100
    return logits[0, :-1][kept].float().log_softmax(-1).gather(-1, targets[kept][:, None]).sum()


def test_a_padded_batch_with_images_scores_each_sample_as_alone(vl, images):
    model, tokenizer = vl
    model.eval()
    rows = samples(tokenizer, images)
    with torch.no_grad():
        alone = torch.cat([sequence_logps(model, batch_of(tokenizer, [row]))[0] for row in rows])
        reference = torch.stack([hf_logps(model, batch_of(tokenizer, [row])) for row in rows])
        torch.testing.assert_close(alone, reference, atol=1e-4, rtol=1e-5)
        for side in ("right", "left"):
            batch = batch_of(tokenizer, rows, side)
            assert batch["pixel_values"].shape[0] > 0 and batch["image_grid_thw"].shape[0] == 3
            assert int(batch["mm_token_type_ids"].sum()) == sum(tokenizer.image_token_count(p) for p in images)
            together, _ = sequence_logps(model, batch)
            torch.testing.assert_close(together, alone, atol=1e-4, rtol=1e-5)
        text_only = batch_of(tokenizer, rows[2:])
        assert "pixel_values" not in text_only  # a VL model's text-only batch: no image inputs
    # the images reach the model: another picture changes the scores of the sample that shows it
    swapped = dict(rows[0], images=[images[0]])
    Image.new("RGB", (56, 56), "white").save(Path(images[0]).with_name("white.png"))
    swapped["images"] = [str(Path(images[0]).with_name("white.png"))]
    with torch.no_grad():
        other = sequence_logps(model, batch_of(tokenizer, [swapped]))[0]
    assert not torch.allclose(other, alone[:1])


def test_dpo_rows_carry_their_prompt_images(vl, images):
    model, tokenizer = vl
    pair = PreferenceExample("p1", (SYSTEM, Turn("user", "Clean?", image=images[1])), "Spotless.", "Whatever.")
    found, empty = DPOModule.render([pair], chat_renderer(MODEL_CFG, tokenizer, 4096))
    assert not empty and found[0]["images"] == [images[1]]
    batch = with_image_inputs(partial(DPOModule.collate, pad_token_id=tokenizer.pad_token_id), tokenizer)(found)
    assert batch["images"] == [[images[1]], [images[1]]] and batch["image_grid_thw"].shape[0] == 2
    with torch.no_grad():
        logps, counts = sequence_logps(model.eval(), batch)
    assert logps.shape == (2,) and bool(torch.isfinite(logps).all()) and bool((counts > 0).all())


def vision_parameters(model) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if ".visual." in f".{n}"}


@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_vision_decides_whether_the_vision_tower_trains(freeze, caplog):
    model, _ = load(model_cfg(freeze_vision=freeze))
    vision = vision_parameters(model)
    assert vision and all(p.requires_grad is not freeze for p in vision.values())
    assert all(p.requires_grad for n, p in model.named_parameters() if n not in vision)
    with caplog.at_level(logging.INFO, logger="rpbench.training"):
        log_parameters(model)
    total = sum(p.numel() for p in model.parameters())
    trainable = total - sum(p.numel() for p in vision.values()) * freeze
    assert f"{total:,} parameters, {trainable:,} trainable" in caplog.text


def test_a_vl_model_config_must_say_whether_the_vision_tower_trains():
    with pytest.raises(ValueError, match="set model.freeze_vision to true"):
        load(model_cfg(freeze_vision=None))


@pytest.mark.slow
def test_lora_on_a_vl_model_adapts_the_language_model_only_trains_and_exports(images, tmp_path):
    lora = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "proj"))
    model, tokenizer = load(model_cfg(lora=lora))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert not any(".visual." in n for n in trainable)  # "proj" names a vision-tower layer too: excluded
    assert any("language_model" in n and "q_proj" in n for n in trainable)
    batch = batch_of(tokenizer, samples(tokenizer, images))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    model.train()
    for _ in range(8):
        logps, counts = sequence_logps(model, batch)
        loss = -logps.sum() / counts.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0] - 0.1, losses
    saved = save_hf(model, tokenizer, tmp_path / "model")
    reloaded, processor = load(model_cfg(name_or_path=str(saved)))
    assert isinstance(processor, ImageTextTokenizer)
    assert processor.image_token_count(images[1]) == tokenizer.image_token_count(images[1])
    with torch.no_grad():
        torch.testing.assert_close(
            sequence_logps(reloaded.eval(), batch)[0], sequence_logps(model.eval(), batch)[0], atol=1e-4, rtol=1e-4
        )
