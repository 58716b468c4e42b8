"""The optional per-sample reasoning field of RPGBench files (ours and the authors' CoRL name)."""

import json

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data import readers

SAMPLE = {
    "sample_ID": "s1",
    "user_persona": "Nadia, a journalist.",
    "agent_character": {"name": "Greta"},
    "dialogue_context": [{"user_query": "Hi!"}],
    "agent_golden_response": "Welcome!",
    "subset_tag": "IDTest",
}


@pytest.fixture(scope="module")
def id_test(data_options):
    """data=rpgbench's format options, its test split IDTest."""
    return data_options("rpgbench", test_splits=["IDTest"])


@pytest.fixture(scope="module")
def read_test(id_test):
    def read_test(path):
        return readers.read("rpgbench", "test", path, id_test)

    return read_test


def write(tmp_path, **extra):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"IDTest": [{**SAMPLE, **extra}], "IDTrain": [{**SAMPLE, **extra}]}), encoding="utf-8")
    return path


def test_reasoning_goes_to_meta_under_either_name(tmp_path, read_test, id_test):
    assert "reasoning" not in read_test(write(tmp_path)).examples[0].meta
    ours = read_test(write(tmp_path, reasoning="Warm welcome.")).examples[0]
    assert ours.meta["reasoning"] == "Warm welcome."
    authors = readers.read("rpgbench", "train", write(tmp_path, thought_policy_generation="Greet by name."), id_test)
    authors = authors.examples[0]
    assert authors.meta["reasoning"] == "Greet by name."


def test_two_reasoning_fields_or_a_bad_one_are_errors_naming_the_field(tmp_path, read_test):
    with pytest.raises(DataFormatError, match="thought_policy_generation"):
        read_test(write(tmp_path, reasoning="a", thought_policy_generation="b"))
    with pytest.raises(DataFormatError, match="reasoning"):
        read_test(write(tmp_path, reasoning=3))
