"""Assistant-only loss masks through both families' chat templates."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rpbench.data.chat import IGNORE_INDEX, ChatRenderer, Rendered
from rpbench.data.records import Turn
from rpbench.models import load_tokenizer


def supervised_texts(tokenizer, rendered: Rendered) -> list[str]:
    """Decode each contiguous supervised span: what the loss trains on, as text."""
    spans: list[list[int]] = []
    previous = False
    for token, label in zip(rendered.input_ids, rendered.labels):
        supervised = label != IGNORE_INDEX
        if supervised and not previous:
            spans.append([])
        if supervised:
            spans[-1].append(token)
        previous = supervised
    return [tokenizer.decode(span) for span in spans]


FAMILIES = {"qwen2": "<|im_end|>", "llama": "<|eot_id|>"}
SPECIAL = ("<|", "|>")

text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="<|>") | st.sampled_from("\n \t"),
    min_size=1,
    max_size=40,
).filter(lambda s: s.strip())


@st.composite
def conversations(draw):
    turns = [Turn("system", draw(text))] if draw(st.booleans()) else []
    if draw(st.booleans()):  # RoleMRC has dialogues the character opens
        turns.append(Turn("assistant", draw(text)))
    for _ in range(draw(st.integers(1, 4))):
        turns += [Turn("user", draw(text)), Turn("assistant", draw(text))]
    return turns


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def renderer(request):
    tokenizer = load_tokenizer({"name_or_path": f"tiny:{request.param}"})
    return ChatRenderer(tokenizer, FAMILIES[request.param], max_length=100_000)


def _rendered_content(renderer: ChatRenderer, turn: Turn) -> str:
    # Llama-3's template trims message contents; ChatML keeps them as they are.
    return turn.content.strip() if renderer.end_of_turn == "<|eot_id|>" else turn.content


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=conversations())
def test_supervised_spans_are_exactly_the_assistant_turns(renderer, turns):
    rendered = renderer.render_conversation(turns)
    expected = [_rendered_content(renderer, t) + renderer.end_of_turn for t in turns if t.role == "assistant"]
    assert supervised_texts(renderer.tokenizer, rendered) == expected
    full_text = renderer.tokenizer.apply_chat_template([t.as_message() for t in turns], tokenize=False)
    assert renderer.tokenizer.decode(rendered.input_ids) == full_text
    assert all(label in (IGNORE_INDEX, token) for token, label in zip(rendered.input_ids, rendered.labels))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=conversations())
def test_prompt_tokens_match_the_generation_prompt(renderer, turns):
    prompt = turns[:-1]
    ids = renderer.render_prompt(prompt, max_length=100_000)
    text = renderer.tokenizer.apply_chat_template(
        [t.as_message() for t in prompt], tokenize=False, add_generation_prompt=True
    )
    assert renderer.tokenizer.decode(ids) == text
    # A prompt renders as the unsupervised prefix of its conversation: training and generation agree.
    full = renderer.render_conversation(turns)
    first_supervised = next(i for i, label in enumerate(full.labels[len(ids) :], len(ids)) if label != IGNORE_INDEX)
    assert full.input_ids[: len(ids)] == ids and first_supervised == len(ids)


def test_over_long_history_is_dropped_from_the_left_keeping_system_and_final_exchange(renderer):
    turns = [Turn("system", "You are Holmes.")]
    for i in range(6):
        turns += [Turn("user", f"question {i} " * 5), Turn("assistant", f"answer {i} " * 5)]
    full = renderer.render_conversation(turns)
    short = ChatRenderer(renderer.tokenizer, renderer.end_of_turn, max_length=len(full.input_ids) - 10)
    rendered = short.render_conversation(turns)
    assert rendered.dropped_turns == 2 and not rendered.truncated
    decoded = renderer.tokenizer.decode(rendered.input_ids)
    assert "You are Holmes." in decoded and "question 0" not in decoded and "answer 5" in decoded
    assert supervised_texts(renderer.tokenizer, rendered)[-1].startswith("answer 5")


def test_a_sample_whose_prompt_fills_the_budget_has_nothing_to_train(renderer):
    turns = [Turn("user", "word " * 400), Turn("assistant", "reply")]
    rendered = ChatRenderer(renderer.tokenizer, renderer.end_of_turn, max_length=50).render_conversation(turns)
    assert rendered.truncated and rendered.n_supervised == 0 and len(rendered.input_ids) == 50


def test_conversation_must_end_on_an_assistant_turn(renderer):
    with pytest.raises(ValueError, match="end on an assistant turn"):
        renderer.render_conversation([Turn("user", "hi")])
