"""Checked simulators (rpbench.scoring.simulator_checks): each check on hand-built session records against
hand-computed values, the word-level measures, the thresholds read from the YAML, and a check name that is not
registered refused at startup."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from rpbench.data.conversation_session import Session
from rpbench.data.records import EvalExample, Turn
from rpbench.scoring.simulator_checks.base import SIMULATOR_CHECKS, SimulatorCheckSettings
from rpbench.scoring.simulator_checks.run import check_sessions, check_summary
from rpbench.scoring.simulator_checks.text import claims_name, jaccard, longest_shared_run, speaker_tag, words

GOAL = "Learn enough about the old lighthouse to plan a safe visit for twelve pupils."


def settings(compose, **changes) -> SimulatorCheckSettings:
    """The YAML's thresholds (evaluator=conversation), with ``changes`` (check -> its keys) applied."""
    values = OmegaConf.to_container(compose("evaluator=conversation").evaluator.simulator_check, resolve=True)
    for check, keys in changes.items():
        values[check] |= keys
    return SimulatorCheckSettings.parse(values, "evaluator.simulator_check")


def record(*user_turns: str, roles: list[str] | None = None, ended_by="turn_limit", limit=4) -> dict:
    """A session of Mara Voss: the opening, then a character reply before each user turn (or ``roles``)."""
    texts = ["Good morning, Captain!", *user_turns]
    roles = roles or ["user"] + ["character", "user"] * len(user_turns)
    messages, given = [], iter(texts)
    for role in roles:
        messages.append({"role": role, "text": next(given) if role == "user" else "Aye, by the tides."})
    return {
        "id": "s",
        "character": "Mara Voss",
        "card": "Mara Voss, a retired sea captain.",
        "persona": "Tom, a schoolteacher.",
        "goal": GOAL,
        "messages": messages,
        "n_character_turns": roles.count("character"),
        "turn_limit": limit,
        "ended_by": ended_by,
    }


def run(name, session, s, embed=None):
    return SIMULATOR_CHECKS.get(name).fn(session, s, embed)


def test_word_measures_match_hand_computed_values():
    assert words("It’s the Captain's boat!") == ["it's", "the", "captain's", "boat"]
    # {tell, me, more, please, 1} and {tell, me, more, please, 2}: 4 shared of 6
    assert jaccard("Tell me more, please (1).", "tell me MORE please 2") == pytest.approx(4 / 6)
    assert jaccard("", "...") == 0.0
    assert longest_shared_run("a b c d e".split(), "x b c d y a b".split()) == 3
    assert longest_shared_run(["a"], ["b"]) == 0
    names = ["Mara Voss", "Mara"]
    assert speaker_tag("Well...\nMara Voss: Aye, lad.", names) and speaker_tag("mara: aye", names)
    assert not speaker_tag("Mara, tell me: how tall is it?", names)
    assert claims_name("Ahoy! I’m Mara, and these are my waters.", names) and claims_name(
        "My name is Mara Voss.", names
    )
    assert not claims_name("I am Mara's guest today.", names) and not claims_name("I am Tom.", names)


def test_goal_leak_counts_the_longest_run_of_goal_words(compose):
    s = settings(compose)  # goal_leak.min_words 6
    leaked = run("goal_leak", record("Hi. So I need to plan a safe visit for twelve pupils, you see."), s)
    assert (
        leaked.value == 8 and leaked.failed and leaked.detail["turns"] == [1]
    )  # "to plan a safe visit for twelve pupils"
    close = run("goal_leak", record("Is it a safe visit for children?", "The old lighthouse, is it tall?"), s)
    assert (
        close.value == 4 and not close.failed and close.detail["runs"] == [4, 3]
    )  # "a safe visit for", "the old lighthouse"
    assert run("goal_leak", record(), s).value is None  # no simulated turn: nothing to check


def test_two_user_turns_in_a_row_are_caught_in_the_transcript(compose):
    s = settings(compose)
    two = run("double_user_turn", record("And the tides?", roles=["user", "user", "character"]), s)
    assert two.value == 1 and two.failed and two.detail["adjacent_at"] == [1]
    written_as_one = run("double_user_turn", record("How tall is it?\nUser: And how old?"), s)
    assert written_as_one.value == 1 and written_as_one.failed and written_as_one.detail["embedded_at"] == [2]
    clean = run("double_user_turn", record("How tall is it?", "Thanks!"), s)
    assert clean.value == 0 and not clean.failed


def test_an_early_stop_marker_fails_below_min_turns_or_the_scenario_limit(compose):
    s = settings(compose, early_stop={"min_turns": 3})
    early = run("early_stop", record(roles=["user", "character"], ended_by="simulator"), s)
    assert early.failed and early.value == 1.0 and early.detail == {"character_turns": 1, "needed": 3}
    short_scenario = record(roles=["user", "character"], ended_by="simulator", limit=1)
    assert not run("early_stop", short_scenario, s).failed  # the scenario asks for one turn only
    assert not run("early_stop", record("a", "b", "c", ended_by="simulator"), s).failed  # 3 character turns
    assert not run("early_stop", record(roles=["user", "character"], ended_by="turn_limit"), s).failed


def test_repeated_or_empty_user_turns_are_caught(compose):
    s = settings(compose)  # min_jaccard 0.8
    repeated = run("repetition", record("Tell me about the tides now.", "Now tell me about the tides!"), s)
    assert repeated.value == 1.0 and repeated.failed and repeated.detail["repeated_pairs"] == [(1, 2)]
    echo = run("repetition", record("Good morning, captain."), s)  # the opening said again
    assert echo.failed and echo.detail["repeated_pairs"] == [(0, 1)]
    empty = run("repetition", record("...", "How tall is the tower?"), s)
    assert empty.failed and empty.detail["empty_turns"] == [1]
    # {how, tall, is, the, tower} vs {how, old, is, the, lamp}: 3 of 7
    fine = run("repetition", record("How tall is the tower?", "How old is the lamp?"), s)
    assert fine.value == pytest.approx(3 / 7) and not fine.failed


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=float)
    return v / np.linalg.norm(v)


def table_embed(table: dict[str, np.ndarray]):
    """Embeddings looked up in ``table`` (hand-made unit vectors), as the encoder would return them."""
    return lambda texts: np.stack([table[t] for t in texts])


def test_persona_adherence_mean_and_slope_match_hand_computed_values(compose):
    s = settings(compose, persona_adherence={"min_mean": 0.5, "min_slope": -0.1, "slope_min_turns": 3})
    session = record("one", "two", "three")
    side = f"{session['persona']} {session['goal']}"
    table = {side: unit(1, 0), "one": unit(1, 0), "two": unit(0.8, 0.6), "three": unit(0.6, 0.8)}
    checked = run("persona_adherence", session, s, table_embed(table))
    # cosines 1, 0.8, 0.6: mean 0.8, slope over turns 1..3 -0.2 (< -0.1 with 3 turns: fails)
    assert checked.detail["similarity"] == pytest.approx([1.0, 0.8, 0.6])
    assert checked.value == pytest.approx(0.8) and checked.detail["slope"] == pytest.approx(-0.2)
    assert checked.failed
    assert not run("persona_adherence", session, settings(compose), table_embed(table)).failed  # slope needs 4 turns
    far = {side: unit(1, 0), "one": unit(0, 1), "two": unit(0.1, 1), "three": unit(0, 1)}
    low = run("persona_adherence", session, s, table_embed(far))
    assert low.failed and low.value == pytest.approx(float(unit(0.1, 1)[0]) / 3)


def test_role_reversal_by_name_tag_claim_or_margin(compose):
    s = settings(compose)  # margin 0.3
    session = record("Mara Voss: Aye, the tides are kind.", "How tall is the tower?", "I'm Mara, lad. Mind the rocks.")
    card, persona = session["card"], session["persona"]
    table = {
        card: unit(1, 0),
        persona: unit(0, 1),
        "Mara Voss: Aye, the tides are kind.": unit(1, 1),  # margin 0
        "How tall is the tower?": unit(0.2, 1),  # margin (0.2 - 1) / |(0.2, 1)| < 0
        "I'm Mara, lad. Mind the rocks.": unit(1, 0.1),  # margin 0.9 / |(1, 0.1)| = 0.896
    }
    checked = run("role_reversal", session, s, table_embed(table))
    assert checked.value == 2 and checked.failed
    assert checked.detail["turns"][0] == {"turn": 1, "reasons": ["speaker_tag"], "margin": pytest.approx(0.0, abs=1e-9)}
    assert checked.detail["turns"][1]["turn"] == 3
    assert checked.detail["turns"][1]["reasons"] == ["claims_name", "closer_to_card"]
    assert checked.detail["max_margin"] == pytest.approx(0.9 / np.hypot(1, 0.1))
    plain = record("How tall is the tower?")
    assert run("role_reversal", plain, s, table_embed(table)).value == 0
    off = settings(compose, role_reversal={"margin": None})
    assert run("role_reversal", session, off, None).detail["turns"][1]["reasons"] == ["claims_name"]


def test_checked_sessions_are_flagged_and_cut_ones_are_not_checked(compose):
    s = settings(compose)
    scenario = record()
    example = EvalExample(
        "mara",
        (Turn("system", "You are Mara Voss."), Turn("user", scenario["messages"][0]["text"])),
        "",
        "Mara Voss",
        {k: scenario[k] for k in ("character", "card", "persona", "goal")} | {"turns": 3},
    )
    leaking, cut, clean = (Session.start(example, 3) for _ in range(3))
    for session in (leaking, cut, clean):
        session.add_reply("Aye.")
    leaking.take_user_reply("I must plan a safe visit for twelve pupils.", None, 1, "[END]")
    cut.take_user_reply(None, "HTTP 503", 1, "[END]")
    clean.take_user_reply("How tall is it?", None, 1, "[END]")
    names = ["goal_leak", "double_user_turn"]
    rows = check_sessions(names, s, [leaking, cut, clean], "evaluator.simulator_check")
    assert [r["failed"] for r in rows] == [["goal_leak"], [], []] and not rows[1]["checked"]
    assert leaking.failed_checks == ("goal_leak",) and leaking.left_out and not clean.left_out and cut.left_out
    summary = check_summary(names, rows)
    assert summary["sessions_failed"] == 1
    assert summary["checks"]["goal_leak"] == {"checked": 2, "failed": 1, "mean_value": pytest.approx((7 + 0) / 2)}


@pytest.mark.slow
def test_an_unknown_check_or_a_bad_threshold_is_refused_at_startup(compose, refused_at_startup):
    message = refused_at_startup(
        compose,
        "data=sample_conversation",
        "evaluator=conversation",
        "judge=local",
        "evaluator.simulator_checks=[role_reversal,no_such_check]",
    )
    assert "evaluator.simulator_checks" in message and "no_such_check" in message
    message = refused_at_startup(
        compose,
        "data=sample_conversation",
        "evaluator=conversation",
        "judge=local",
        "evaluator.simulator_check.repetition.min_jaccard=0",
    )
    assert "evaluator.simulator_check.repetition.min_jaccard=0" in message
