"""Data that parses but is wrong: lone surrogates, ids that move with the file, pairs that prefer nothing."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.prepare import train_val_split
from rpbench.data.rpgbench import TEST_SPLITS

SKIP = replace(readers.STRICT, on_error="skip")

SYSTEM_USER = [{"role": "system", "content": "You are Ann."}, {"role": "user", "content": "Hi"}]
SFT = {"conversations": [*SYSTEM_USER, {"role": "assistant", "content": "Hello."}]}
PAIR = {"prompt": SYSTEM_USER, "chosen": "Hello.", "rejected": "Go away."}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------- lone UTF-16 surrogates


def test_lone_surrogate_in_a_json_lines_record_is_a_named_skippable_error(tmp_path, rolemrc_options):
    bad = json.dumps(SFT).replace('"Hello."', '"Hel\\ud800lo."')  # the escape as it stands in the file
    path = write_lines(tmp_path / "train.jsonl", [json.dumps(SFT), bad, json.dumps({**SFT, "id": "third"})])
    with pytest.raises(DataFormatError) as caught:
        readers.read("rolemrc", "train", path, rolemrc_options)
    error = caught.value
    assert (error.path, error.record, error.field) == (str(path), 2, "conversations[2].content")
    assert "surrogate" in error.problem
    str(error).encode("utf-8")  # the message itself is printable
    result = readers.read("rolemrc", "train", path, rolemrc_options, SKIP)
    assert len(result.examples) == 2 and result.summary()["skipped"] == 1


@pytest.mark.parametrize(
    "record,field",
    [
        ({"id": "x", "chosen": "\udfff"}, "chosen"),
        ({"prompt": [{"role": "user", "content": "a"}, {"role": "user", "\ud83d": "b"}]}, "prompt[1].'\\ud83d'"),
        ({"id": "\ud800"}, "id"),
    ],
)
def test_lone_surrogate_in_a_json_list_names_the_field_even_in_a_key(tmp_path, record, field, rolemrc_options):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps([PAIR, {**PAIR, **record}]), encoding="utf-8")  # json.dumps writes \\udXXX escapes
    with pytest.raises(DataFormatError) as caught:
        readers.read("rolemrc", "pairs", path, rolemrc_options)
    assert (caught.value.record, caught.value.field) == (1, field)
    str(caught.value).encode("utf-8")
    assert len(readers.read("rolemrc", "pairs", path, rolemrc_options, SKIP).examples) == 1


def test_a_surrogate_pair_is_valid_text(tmp_path, rolemrc_options):
    path = write_lines(tmp_path / "train.jsonl", [json.dumps(SFT).replace("Hello.", "Hello \\ud83d\\ude00")])
    [example] = readers.read("rolemrc", "train", path, rolemrc_options).examples
    assert example.turns[-1].content == "Hello \U0001f600"


def test_lone_surrogate_in_rpgbench_is_named_by_split_and_index(tmp_path, sample_dir, rpgbench_options):
    document = json.loads((sample_dir / "rpgbench" / "rpgbench.json").read_text(encoding="utf-8"))
    document["IDTest"][1]["agent_golden_response"] = "oops \ud800"
    path = tmp_path / "rpgbench.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        readers.read("rpgbench", "test", path, rpgbench_options)
    assert (caught.value.record, caught.value.field) == ("IDTest[1]", "agent_golden_response")
    result = readers.read("rpgbench", "test", path, rpgbench_options, SKIP)
    assert len(result.skipped) == 1 and len(result.examples) == sum(len(document[s]) for s in TEST_SPLITS) - 1


# ---------------------------------------------------------------- ids from content


@pytest.fixture(scope="module")
def val_contents(rolemrc_options):
    def val_contents(path: Path) -> tuple[list[str], set[str]]:
        train, val = train_val_split(readers.read("rolemrc", "train", path, rolemrc_options).examples, 0.15, seed=3)
        assert train and val
        return sorted(e.id for e in val), {json.dumps([t.content for t in e.turns]) for e in val}

    return val_contents


def test_split_survives_renaming_blank_lines_reordering_and_key_order(tmp_path, sample_dir, val_contents):
    lines = (sample_dir / "rolemrc" / "train-sft.jsonl").read_text(encoding="utf-8").splitlines()
    before = val_contents(write_lines(tmp_path / "train-sft.jsonl", lines))

    shuffled = [json.dumps(dict(reversed(json.loads(line).items()))) for line in lines]  # other key order
    random.Random(0).shuffle(shuffled)
    padded = [x for line in shuffled for x in (line, "")]  # a blank line after every record
    after = val_contents(write_lines(tmp_path / "renamed.jsonl", ["", *padded]))
    assert after == before

    as_list = tmp_path / "as_list.json"
    as_list.write_text(json.dumps([json.loads(line) for line in lines], indent=1), encoding="utf-8")
    assert val_contents(as_list) == before


def test_identical_records_without_ids_are_a_named_duplicate(tmp_path, rolemrc_options):
    reordered = json.dumps(dict(reversed(SFT.items())))  # the same content, keys in another order
    other = {**SFT, "conversations": [*SYSTEM_USER, {"role": "assistant", "content": "Hi there."}]}
    path = write_lines(tmp_path / "train.jsonl", [json.dumps(SFT), json.dumps(other), "", reordered])
    with pytest.raises(DataFormatError) as caught:
        readers.read("rolemrc", "train", path, rolemrc_options)
    assert (caught.value.record, caught.value.field) == (4, "id") and "also record 1" in caught.value.problem
    result = readers.read("rolemrc", "train", path, rolemrc_options, SKIP)
    assert len(result.examples) == 2 and len(result.skipped) == 1


# ---------------------------------------------------------------- pairs that prefer nothing


@pytest.mark.parametrize("rejected", ["Hello.", "  Hello.\n"])
def test_pair_with_chosen_equal_to_rejected_is_a_named_skippable_error(tmp_path, rejected, rolemrc_options):
    path = write_lines(tmp_path / "pairs.jsonl", [json.dumps(PAIR), json.dumps({**PAIR, "rejected": rejected})])
    with pytest.raises(DataFormatError) as caught:
        readers.read("rolemrc", "pairs", path, rolemrc_options)
    assert (caught.value.path, caught.value.record, caught.value.field) == (str(path), 2, "rejected")
    assert "different from 'chosen'" in caught.value.problem
    result = readers.read("rolemrc", "pairs", path, rolemrc_options, SKIP)
    assert [e.rejected for e in result.examples] == ["Go away."] and result.summary()["skipped"] == 1
