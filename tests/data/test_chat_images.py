"""Rendering with images (tiny Qwen2-VL): image tokens at their real count, never supervised, never cut."""

from __future__ import annotations

import pytest
from PIL import Image

from rpbench.data.chat import IGNORE_INDEX, ImageBudgetError
from rpbench.data.records import Turn
from rpbench.models import chat_renderer, load_tokenizer
from rpbench.models.config_tree import compose_model_config

SYSTEM = Turn("system", "You are Chandler Bing, sarcastic and kind.")


@pytest.fixture(scope="module")
def model_cfg():
    return compose_model_config("tiny-qwen2-vl")


@pytest.fixture(scope="module")
def tokenizer(model_cfg):
    return load_tokenizer(model_cfg)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two images of different sizes (so different token counts)."""
    folder = tmp_path_factory.mktemp("images")
    paths = []
    for name, size, colour in (("small.png", (56, 56), "red"), ("wide.png", (112, 84), "blue")):
        Image.new("RGB", size, colour).save(folder / name)
        paths.append(str(folder / name))
    return paths


def renderer(model_cfg, tokenizer, max_length: int):
    return chat_renderer(model_cfg, tokenizer, max_length)


def image_spans(tokenizer, ids: list[int]) -> list[list[int]]:
    return [ids[start:end] for start, end in tokenizer.image_spans(ids)]


def whole_span(tokenizer, count: int) -> list[int]:
    opening, closing = (tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    return [opening, *[tokenizer.image_token_id] * count, closing]


def test_a_turn_with_an_image_renders_its_real_token_count_and_only_assistant_text_is_supervised(
    model_cfg, tokenizer, images
):
    small, wide = images
    counts = [tokenizer.image_token_count(small), tokenizer.image_token_count(wide)]
    assert counts[0] != counts[1] and min(counts) >= 4
    turns = [
        SYSTEM,
        Turn("user", "What is in this picture?", image=small),
        Turn("assistant", "A red square. Could it BE any redder?"),
        Turn("user", "And this one?", image=wide),
        Turn("assistant", "Blue. Like my mood on Mondays."),
    ]
    rendered = renderer(model_cfg, tokenizer, 4096).render_conversation(turns)
    assert rendered.images == (small, wide)
    assert rendered.as_sample()["images"] == [small, wide]
    assert image_spans(tokenizer, rendered.input_ids) == [whole_span(tokenizer, n) for n in counts]
    image_id = tokenizer.image_token_id
    assert rendered.input_ids.count(image_id) == sum(counts)
    assert all(label != image_id for label in rendered.labels)
    supervised = [t for t, label in zip(rendered.input_ids, rendered.labels) if label != IGNORE_INDEX]
    assert tokenizer.decode(supervised) == (
        "A red square. Could it BE any redder?<|im_end|>Blue. Like my mood on Mondays.<|im_end|>"
    )


def test_history_turns_with_an_image_are_never_dropped(model_cfg, tokenizer, images):
    small = images[0]
    turns = [
        SYSTEM,
        Turn("user", "Look at this. " + "blah " * 30, image=small),
        Turn("assistant", "I see it. " + "yada " * 30),
        Turn("user", "Second question " + "more " * 30),
        Turn("assistant", "Second answer " + "words " * 30),
        Turn("user", "Final question?"),
        Turn("assistant", "Final answer."),
    ]
    kept = [turns[0], turns[1], turns[5], turns[6]]
    budget = len(renderer(model_cfg, tokenizer, 100_000).render_conversation(kept).input_ids)
    fitted = renderer(model_cfg, tokenizer, budget).render_conversation(turns)
    assert fitted.dropped_turns == 3 and not fitted.truncated  # the reply, question and reply after the image
    assert fitted.images == (small,)
    assert image_spans(tokenizer, fitted.input_ids) == [whole_span(tokenizer, tokenizer.image_token_count(small))]
    assert "Look at this." in tokenizer.decode(fitted.input_ids)
    assert "Second question" not in tokenizer.decode(fitted.input_ids)


def test_an_over_long_mmrole_record_keeps_its_image_and_loses_text(model_cfg, tokenizer, images):
    """MMRole: one long user turn holds the history, the image on it; the cut takes text, never the image."""
    small = images[0]
    prompt = [SYSTEM, Turn("user", "Look at the picture. " + "story " * 300 + "What do you say?", image=small)]
    count = tokenizer.image_token_count(small)
    for limit in (120, 60):
        fitted = renderer(model_cfg, tokenizer, 4096).fit_prompt(prompt, max_length=limit)
        assert fitted.cut == "after_system" and len(fitted.input_ids) == limit
        assert fitted.images == (small,)
        assert image_spans(tokenizer, fitted.input_ids) == [whole_span(tokenizer, count)]
        assert tokenizer.decode(fitted.input_ids).endswith("What do you say?<|im_end|>\n<|im_start|>assistant\n")
    # training: the reply is cut away at the end (reported by the caller as no supervised token), the image stays
    turns = [*prompt, Turn("assistant", "Could this BE any longer?")]
    rendered = renderer(model_cfg, tokenizer, 100).render_conversation(turns)
    assert rendered.truncated and len(rendered.input_ids) == 100 and rendered.n_supervised == 0
    assert image_spans(tokenizer, rendered.input_ids) == [whole_span(tokenizer, count)]


def test_a_cut_that_would_land_inside_an_image_cuts_text_around_it(model_cfg, tokenizer, images):
    small = images[0]
    count = tokenizer.image_token_count(small)
    turns = [Turn("system", "text before " * 20 + "end."), Turn("user", "after", image=small)]
    turns.append(Turn("assistant", "A reply."))
    full = renderer(model_cfg, tokenizer, 100_000).render_conversation(turns)
    start, end = tokenizer.image_spans(full.input_ids)[0]
    limit = start + count // 2  # a plain end cut would slice the image in half
    rendered = renderer(model_cfg, tokenizer, limit).render_conversation(turns)
    assert len(rendered.input_ids) == limit
    assert image_spans(tokenizer, rendered.input_ids) == [whole_span(tokenizer, count)]
    assert rendered.input_ids[-(end - start) :] == whole_span(tokenizer, count)  # text before it made room
    assert rendered.input_ids[: limit - (end - start)] == full.input_ids[: limit - (end - start)]


def test_images_and_system_turn_over_the_budget_are_an_error(model_cfg, tokenizer, images):
    wide = images[1]
    prompt = [SYSTEM, Turn("user", "What is it?", image=wide)]
    system_tokens = len(tokenizer("<|im_start|>system\n" + SYSTEM.content + "<|im_end|>\n")["input_ids"])
    limit = system_tokens + tokenizer.image_token_count(wide)  # the span adds start and end tokens: 2 too many
    with pytest.raises(ImageBudgetError, match="its images and system turn take"):
        renderer(model_cfg, tokenizer, 4096).fit_prompt(prompt, max_length=limit)
    with pytest.raises(ImageBudgetError, match="its images take"):
        renderer(model_cfg, tokenizer, 4).render_conversation([*prompt[1:], Turn("assistant", "A thing.")])


def test_reply_rows_carry_the_prompt_images(model_cfg, tokenizer, images):
    small = images[0]
    prompt = [SYSTEM, Turn("user", "Describe it.", image=small)]
    chosen, rejected = renderer(model_cfg, tokenizer, 4096).render_replies(prompt, ["Red.", "I refuse."])
    assert chosen.images == rejected.images == (small,)
    assert chosen.input_ids.count(tokenizer.image_token_id) == tokenizer.image_token_count(small)
    assert tokenizer.decode([t for t, lab in zip(chosen.input_ids, chosen.labels) if lab != IGNORE_INDEX]) == (
        "Red.<|im_end|>"
    )


def test_an_image_the_processor_refuses_is_an_image_error_naming_it(model_cfg, tokenizer, tmp_path):
    from rpbench.models.vision import ImageError

    strip = tmp_path / "strip.png"
    Image.new("RGB", (6000, 20), "red").save(strip)  # an aspect ratio of 300: Qwen2-VL's processor refuses it
    turns = [Turn("user", "What is this?", image=str(strip)), Turn("assistant", "A strip.")]
    with pytest.raises(ImageError, match=r"image '.*strip.png' cannot be used by the model's image processor"):
        renderer(model_cfg, tokenizer, 4096).render_conversation(turns)
    with pytest.raises(ImageError, match="aspect ratio"):
        renderer(model_cfg, tokenizer, 4096).fit_prompt(turns[:1])
