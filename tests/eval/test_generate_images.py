"""Batched generation with images on the tiny Qwen2-VL model: left padding under multimodal (M-RoPE)
positions, the predictions file from MMRole records, and the errors of prompts a model cannot take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rpbench.data import readers
from rpbench.data.mmrole.reader import MMRoleOptions
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.generate import generate_predictions
from rpbench.models.families.qwen2_vl import Qwen2VL
from rpbench.models.generation import batch_inputs, render_prompts

SAMPLE = Path(__file__).resolve().parents[2] / "rpbench" / "resources" / "sample" / "mmrole"
IMAGES = sorted(str(p) for p in (SAMPLE / "images").rglob("*.jpg"))
MAX_NEW = 8
WITH_IMAGES = MMRoleOptions(image_root=str(SAMPLE / "images"), default_system=None, per_turn_samples=False)


@pytest.fixture(scope="module")
def model_cfg(tiny_settings):
    """tiny-qwen2-vl with initializer_range 0.2: random weights whose greedy continuations vary from token to token
    (and with the image)."""
    return tiny_settings("qwen2_vl", end_of_turn="<|im_end|>", freeze_vision=True, tiny={"initializer_range": 0.2})


@pytest.fixture(scope="module")
def tiny_vl(model_cfg):
    from rpbench.models import load

    model, tok = load(model_cfg)
    return model.eval(), tok


def message(role: str, text: str, image: str | None = None) -> dict:
    return Qwen2VL.message(Turn(role, text, image=image))


# Prompts of different lengths: one image, none, two (in two turns), one image after a long history.
CONVERSATIONS = [
    ([message("system", "You are Mara."), message("user", "What is here?", IMAGES[0])], [IMAGES[0]]),
    ([message("user", "Tell me a long story about the sea and the tides " * 3)], []),
    (
        [
            message("user", "And this?", IMAGES[1]),
            message("assistant", "A crowd."),
            message("user", "Compare it with this one.", IMAGES[2]),
        ],
        [IMAGES[1], IMAGES[2]],
    ),
    ([message("user", "Hello " * 9), message("assistant", "Ahoy."), message("user", "Look", IMAGES[3])], [IMAGES[3]]),
]


def test_images_are_distinct_sizes(model_cfg):
    """The fixture's images become different numbers of tokens, so rows differ in image length too."""
    from rpbench.models import load_tokenizer

    tok = load_tokenizer(model_cfg)
    assert len({tok.image_token_count(image) for image in IMAGES}) > 1


def test_left_padded_rows_have_the_logits_of_rows_alone(tiny_vl):
    model, tok = tiny_vl
    rows = render_prompts(tok, [c for c, _ in CONVERSATIONS], [i for _, i in CONVERSATIONS])
    assert len({len(r) for r in rows}) == len(rows)
    images = [i for _, i in CONVERSATIONS]
    batch = batch_inputs(tok, rows, tok.pad_token_id, images)
    assert int(batch["attention_mask"].sum()) == sum(map(len, rows))
    with torch.no_grad():
        padded = model(**batch).logits
        for i, row in enumerate(rows):
            alone = model(**batch_inputs(tok, [row], tok.pad_token_id, [images[i]])).logits[0]
            torch.testing.assert_close(padded[i, -len(row) :], alone, atol=1e-4, rtol=1e-4)


def test_cached_decoding_positions_equal_a_full_forward(tiny_vl):
    """Each token generated with the cache (positions shifted by the image's rope delta) is the argmax of a
    forward over prompt plus completion without cache, in a left-padded batch as alone."""
    model, tok = tiny_vl
    rows = render_prompts(tok, [c for c, _ in CONVERSATIONS], [i for _, i in CONVERSATIONS])
    images = [i for _, i in CONVERSATIONS]
    batch = batch_inputs(tok, rows, tok.pad_token_id, images)
    width = batch["input_ids"].shape[1]
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=None)
    for i, row in enumerate(rows):
        completion = out[i, width:].tolist()
        full = batch_inputs(tok, [row + completion], tok.pad_token_id, [images[i]])
        with torch.no_grad():
            logits = model(**full).logits[0]
        assert logits[len(row) - 1 : -1].argmax(-1).tolist() == completion


@pytest.mark.slow
def test_batched_generation_with_images_equals_one_at_a_time(tiny_vl, generate_texts):
    model, tok = tiny_vl
    conversations, images = [c for c, _ in CONVERSATIONS], [i for _, i in CONVERSATIONS]
    batched = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, batch_size=4, images=images)
    pairs = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, batch_size=2, images=images)
    single = generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, batch_size=1, images=images)
    assert batched == pairs == single
    assert len(set(batched)) == len(batched) and all(batched)
    # the model sees the image: another image of the same token count changes the reply
    same_size = [p for p in IMAGES if p != IMAGES[0] and tok.image_token_count(p) == tok.image_token_count(IMAGES[0])]
    [other] = generate_texts(model, tok, conversations[:1], max_new_tokens=MAX_NEW, images=[same_size[:1]])
    assert other != batched[0]


def test_image_count_mismatch_is_an_error(tiny_vl):
    model, tok = tiny_vl
    [row] = render_prompts(tok, [CONVERSATIONS[0][0]], [[IMAGES[0]]])
    with pytest.raises(ValueError, match=r"image tokens, the 2 images make"):
        batch_inputs(tok, [row], tok.pad_token_id, [[IMAGES[0], IMAGES[1]]])
    with pytest.raises(ValueError, match="image tokens but no image was given"):
        batch_inputs(tok, [row], tok.pad_token_id, [[]])


def mmrole_examples() -> list[EvalExample]:
    return readers.read("mmrole", "test", SAMPLE / "comment_test.json", WITH_IMAGES).examples


def test_predictions_from_mmrole_records_see_their_images(tiny_vl, tmp_path, generation_options, generate_texts):
    model, tok = tiny_vl
    examples = mmrole_examples()[:5]
    assert all(sum(t.image is not None for t in ex.prompt) == 1 for ex in examples)
    cfg = generation_options(max_new_tokens=MAX_NEW, batch_size=3, max_prompt_length=2048)
    report = generate_predictions(model, tok, examples, tmp_path / "predictions.jsonl", cfg)
    assert report.images == {"used": 5, "history_dropped": 0}
    predictions = [json.loads(line)["prediction"] for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    conversations = [[Qwen2VL.message(t) for t in ex.prompt] for ex in examples]
    images = [[t.image for t in ex.prompt if t.image] for ex in examples]
    assert predictions == generate_texts(model, tok, conversations, max_new_tokens=MAX_NEW, images=images)


def test_a_cut_prompt_keeps_its_image_whole_and_images_over_the_budget_name_the_record(
    tiny_vl, tmp_path, generation_options
):
    model, tok = tiny_vl
    example = EvalExample(
        id="cut",
        prompt=(Turn("user", "Look at this " * 20, image=IMAGES[0]),),
        reference="r",
        task="t",
    )
    report = generate_predictions(
        model, tok, [example], tmp_path / "a.jsonl", generation_options(max_prompt_length=60, max_new_tokens=2)
    )
    assert report.prompts_fitted["cut_left"] == 1 and report.images == {"used": 1, "history_dropped": 0}
    with pytest.raises(ValueError, match=r"record 'cut': field 'prompt': its images take \d+ tokens, more than the 8"):
        generate_predictions(model, tok, [example], tmp_path / "b.jsonl", generation_options(max_prompt_length=8))


def test_fitting_a_long_prompt_keeps_its_images_and_counts_them(tiny_vl, tmp_path, generation_options):
    model, tok = tiny_vl
    example = EvalExample(
        id="long",
        prompt=(
            Turn("user", "Look " * 30, image=IMAGES[0]),
            Turn("assistant", "Yes."),
            Turn("user", "Now this", image=IMAGES[1]),
        ),
        reference="r",
        task="t",
    )
    cfg = generation_options(max_prompt_length=60, max_new_tokens=2)
    report = generate_predictions(model, tok, [example], tmp_path / "p.jsonl", cfg)
    # history turns with an image are never dropped: the text around the images goes instead
    assert report.images == {"used": 2, "history_dropped": 0}
    assert report.prompts_fitted["history_dropped"] + report.prompts_fitted["cut_after_system"] >= 1


def test_text_only_model_refuses_image_records_clearly(tmp_path, tiny_model, generation_options):
    from rpbench.models import load

    model, tok = load(tiny_model())
    with pytest.raises(ValueError, match=r"has an image, but .* is a text-only model.*data.images=drop"):
        generate_predictions(model, tok, mmrole_examples()[:1], tmp_path / "p.jsonl", generation_options())
