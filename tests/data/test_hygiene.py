"""Split hygiene: overlap between training and test records is refused unless allowed, and counted."""

from __future__ import annotations

import pytest

from rpbench.data import readers
from rpbench.data.hygiene import check_overlap
from rpbench.data.records import EvalExample, PreferenceExample, SFTExample, Turn


def sft(rid: str, question: str, answer: str) -> SFTExample:
    return SFTExample(rid, (Turn("system", "You are Ann."), Turn("user", question), Turn("assistant", answer)))


def evaluated(rid: str, question: str, reference: str) -> EvalExample:
    return EvalExample(rid, (Turn("system", "You are Ann."), Turn("user", question)), reference, "t")


def test_overlap_refused_with_count_and_first_ids():
    train = [sft(f"tr{i}", f"Q{i}", f"A{i}") for i in range(10)]
    tests = [evaluated(f"te{i}", f"Q{i}", f"A{i}") for i in range(2, 9)] + [evaluated("other", "Q1", "different")]
    with pytest.raises(ValueError) as caught:
        check_overlap(train, tests, allow_overlap=False, train_name="rolemrc train", test_name="rolemrc test")
    message = str(caught.value)
    assert message.startswith("7 rolemrc train records also appear in rolemrc test")
    assert "tr2 (= rolemrc test te2), tr3" in message and "tr6 (= rolemrc test te6)" in message
    assert "tr7" not in message and "tr1" not in message and "data.allow_overlap=true" in message
    assert check_overlap(train, tests, allow_overlap=True) == 7


def test_overlap_ignores_surrounding_whitespace_but_not_content():
    train = [sft("a", "  Q  ", "A\n"), sft("b", "Q", "A!"), sft("c", "Q?", "A")]
    assert check_overlap(train, [evaluated("t", "Q", "A")], allow_overlap=True) == 1


def test_pairs_are_checked_by_prompt_and_chosen():
    pair = PreferenceExample("p", (Turn("system", "You are Ann."), Turn("user", "Q")), "A", "B")
    assert check_overlap([pair], [evaluated("t", "Q", "A")], allow_overlap=True) == 1
    assert check_overlap([pair], [evaluated("t", "Q", "B")], allow_overlap=False) == 0


def test_sft_matched_on_its_last_turn_only():
    multi = SFTExample("m", (Turn("user", "Q"), Turn("assistant", "A"), Turn("user", "Q2"), Turn("assistant", "A2")))
    assert check_overlap([multi], [EvalExample("t", (Turn("user", "Q"),), "A", "x")], allow_overlap=False) == 0
    assert check_overlap([multi], [EvalExample("t", multi.turns[:-1], "A2", "x")], allow_overlap=True) == 1


def test_bundled_samples_do_not_overlap(data_options, sample_dir):
    rolemrc, mmrole, rpgbench = data_options("sample"), data_options("sample_mmrole"), data_options("sample_rpgbench")
    rolemrc_test = readers.read("rolemrc", "test", sample_dir / "rolemrc" / "test.jsonl", rolemrc)
    for split, name in (("train", "train-sft.jsonl"), ("pairs", "train-rl.jsonl")):
        train = readers.read("rolemrc", split, sample_dir / "rolemrc" / name, rolemrc)
        assert check_overlap(train.examples, rolemrc_test.examples, allow_overlap=False) == 0
    mm = sample_dir / "mmrole"
    mm_test = [
        e
        for s in ("comment", "human-role", "inter-role")
        for e in readers.read("mmrole", "test", mm / f"{s}_test.json", mmrole).examples
    ]
    mm_train = readers.read("mmrole", "train", mm / "train.json", mmrole).examples
    assert check_overlap(mm_train, mm_test, allow_overlap=False) == 0
    rpg = sample_dir / "rpgbench" / "rpgbench.json"
    assert (
        check_overlap(
            readers.read("rpgbench", "train", rpg, rpgbench).examples,
            readers.read("rpgbench", "test", rpg, rpgbench).examples,
            allow_overlap=False,
        )
        == 0
    )


def test_sample_test_split_against_itself_is_all_overlap(sample_dir, data_options):
    rpg = sample_dir / "rpgbench" / "rpgbench.json"
    examples = readers.read("rpgbench", "test", rpg, data_options("sample_rpgbench")).examples
    assert check_overlap(examples, examples, allow_overlap=True) == len(examples)
