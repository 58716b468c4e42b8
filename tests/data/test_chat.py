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
def renderer(request, tiny_model):
    tokenizer = load_tokenizer(tiny_model(request.param))
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
    assert short.cuts == {"truncated": 0, "cut_unevenly": 0, "history_dropped": 1}  # counted for the report
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


def _prompt_length(rendered: Rendered) -> int:
    return next(i for i, label in enumerate(rendered.labels) if label != IGNORE_INDEX)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=conversations(), chosen=text, rejected=text, max_length=st.integers(8, 400))
def test_chosen_and_rejected_rows_share_their_prompt_tokens(renderer, turns, chosen, rejected, max_length):
    prompt = turns[:-1]
    fitted = ChatRenderer(renderer.tokenizer, renderer.end_of_turn, max_length)
    rows = fitted.render_replies(prompt, [chosen * 3, rejected])  # replies of different lengths
    for row in rows:
        assert len(row.input_ids) <= max_length
    if not all(row.n_supervised for row in rows):  # the prompt filled the budget: identical, reply-less rows
        assert rows[0].input_ids[: max_length - 1] == rows[1].input_ids[: max_length - 1]
        return
    n = _prompt_length(rows[0])
    assert _prompt_length(rows[1]) == n and rows[0].input_ids[:n] == rows[1].input_ids[:n]
    assert rows[0].dropped_turns == rows[1].dropped_turns
    uncut = renderer.render_replies(prompt, [chosen * 3, rejected])
    for row, whole, reply in zip(rows, uncut, [chosen * 3, rejected]):
        expected = _rendered_content(renderer, Turn("assistant", reply)) + renderer.end_of_turn
        assert supervised_texts(renderer.tokenizer, whole) == [expected]  # the final reply only
        labelled = [t for t, label in zip(row.input_ids, row.labels) if label != IGNORE_INDEX]
        whole_labelled = [t for t, label in zip(whole.input_ids, whole.labels) if label != IGNORE_INDEX]
        assert whole_labelled[: len(labelled)] == labelled and (row.truncated or labelled == whole_labelled)


def test_reply_rows_label_only_the_final_reply_of_a_multi_turn_prompt(renderer):
    prompt = [
        Turn("system", "You are Holmes."),
        Turn("user", "Who are you?"),
        Turn("assistant", "A detective."),
        Turn("user", "Where do you live?"),
    ]
    (row,) = renderer.render_replies(prompt, ["Baker Street."])
    assert supervised_texts(renderer.tokenizer, row) == ["Baker Street." + renderer.end_of_turn]
    # the prompt part is tokenized exactly as the generation prompt
    assert row.input_ids[: _prompt_length(row)] == renderer.render_prompt(prompt)


def test_pair_drops_the_same_history_from_both_rows(renderer):
    prompt = [Turn("system", "You are Holmes.")]
    for i in range(4):
        prompt += [Turn("user", f"question {i} " * 5), Turn("assistant", f"answer {i} " * 5)]
    prompt.append(Turn("user", "last question"))
    full = renderer.render_replies(prompt, ["short", "a much longer reply " * 6])
    budget = len(full[1].input_ids) - 5  # only the longer reply overflows: both rows lose the same turns
    short = ChatRenderer(renderer.tokenizer, renderer.end_of_turn, budget)
    rows = short.render_replies(prompt, ["short", "a much longer reply " * 6])
    assert [r.dropped_turns for r in rows] == [2, 2] and not any(r.truncated for r in rows)
    assert short.cuts == {"truncated": 0, "cut_unevenly": 0, "history_dropped": 1}  # one pair, counted once
    for row in rows:
        decoded = renderer.tokenizer.decode(row.input_ids)
        assert "You are Holmes." in decoded and "question 0" not in decoded and "question 1" in decoded


def test_an_over_long_test_prompt_keeps_its_system_turn(renderer):
    system = Turn("system", "You are Holmes, the detective of Baker Street.")
    history = [Turn("user", "old question " * 3), Turn("assistant", "old answer " * 3)]
    final = Turn("user", "word " * 200 + "What is the answer?")
    whole = renderer.fit_prompt([system, *history, final], max_length=100_000)
    system_ids = renderer.fit_prompt([system, final], max_length=100_000).input_ids
    limit = len(system_ids) - 50
    fitted = renderer.fit_prompt([system, *history, final], max_length=limit)
    assert whole.cut == "" and fitted.dropped_turns == 2 and fitted.cut == "after_system"
    decoded = renderer.tokenizer.decode(fitted.input_ids)
    assert len(fitted.input_ids) == limit and "You are Holmes, the detective of Baker Street." in decoded
    assert fitted.input_ids[-60:] == system_ids[-60:]  # the question and the generation header are kept
    tiny = renderer.fit_prompt([system, final], max_length=8)
    assert tiny.cut == "left" and tiny.input_ids == system_ids[-8:]
