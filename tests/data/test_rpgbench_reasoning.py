"""The optional per-sample reasoning field of RPGBench files (ours and the authors' CoRL name)."""

import json

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data.rpgbench import read_sft, read_test

SAMPLE = {
    "sample_ID": "s1",
    "user_persona": "Nadia, a journalist.",
    "agent_character": {"name": "Greta"},
    "dialogue_context": [{"user_query": "Hi!"}],
    "agent_golden_response": "Welcome!",
    "subset_tag": "IDTest",
}


def write(tmp_path, **extra):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"IDTest": [{**SAMPLE, **extra}], "IDTrain": [{**SAMPLE, **extra}]}), encoding="utf-8")
    return path


def test_reasoning_goes_to_meta_under_either_name(tmp_path):
    assert "reasoning" not in read_test(write(tmp_path), test_splits=["IDTest"]).examples[0].meta
    ours = read_test(write(tmp_path, reasoning="Warm welcome."), test_splits=["IDTest"]).examples[0]
    assert ours.meta["reasoning"] == "Warm welcome."
    authors = read_sft(write(tmp_path, thought_policy_generation="Greet by name.")).examples[0]
    assert authors.meta["reasoning"] == "Greet by name."


def test_two_reasoning_fields_or_a_bad_one_are_errors_naming_the_field(tmp_path):
    with pytest.raises(DataFormatError, match="thought_policy_generation"):
        read_test(write(tmp_path, reasoning="a", thought_policy_generation="b"), test_splits=["IDTest"])
    with pytest.raises(DataFormatError, match="reasoning"):
        read_test(write(tmp_path, reasoning=3), test_splits=["IDTest"])
