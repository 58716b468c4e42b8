"""data.duplicates: identical records without an id in a training file are dropped (the default), kept under
numbered ids, or an error; test records and records naming their own id stay strict."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers
from rpbench.data.prepare import read_split
from rpbench.data.rolemrc import RoleMRCOptions
from rpbench.data.settings import data_spec
from rpbench.validate import validate

CHAT = [{"role": "user", "content": "Where do you live?"}, {"role": "assistant", "content": "At 221B Baker Street."}]
OTHER = [{"role": "user", "content": "Your friend?"}, {"role": "assistant", "content": "Dr Watson."}]


def jsonl(path: Path, records: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.fixture
def dump(tmp_path) -> str:
    """A scraped dump: one record three times, another once, none with an id."""
    return jsonl(
        tmp_path / "dump.jsonl", [{"messages": CHAT}, {"messages": OTHER}, {"messages": CHAT}, {"messages": CHAT}]
    )


def test_drop_is_the_default_keeps_the_first_counts_and_logs(compose, dump, caplog):
    cfg = compose("data=custom", f"data.files.train={dump}")
    assert cfg.data.duplicates == "drop"
    with caplog.at_level(logging.INFO, logger="rpbench.data.prepare"):
        result = read_split(data_spec(cfg.data), "train")
    assert [e.turns[-1].content for e in result.examples] == ["At 221B Baker Street.", "Dr Watson."]
    assert result.summary()["duplicates"] == 2 and result.summary()["duplicates_dropped"] == 2
    assert "data.files.train: 2 identical records without an id dropped" in caplog.text


def test_keep_numbers_the_repeats_and_error_refuses_them(compose, dump):
    kept = read_split(
        data_spec(compose("data=custom", f"data.files.train={dump}", "data.duplicates=keep").data), "train"
    )
    first = kept.examples[0].id
    assert [e.id for e in kept.examples] == [first, kept.examples[1].id, f"{first}#2", f"{first}#3"]
    assert kept.summary()["duplicates"] == 2 and "duplicates_dropped" not in kept.summary()
    with pytest.raises(DataFormatError, match=r"dump.jsonl: record 3: field 'id': a unique record id"):
        read_split(data_spec(compose("data=custom", f"data.files.train={dump}", "data.duplicates=error").data), "train")


def test_test_records_and_own_ids_stay_strict(compose, dump, tmp_path):
    with pytest.raises(DataFormatError, match=r"record 3: field 'id': a unique record id"):
        read_split(data_spec(compose("data=custom", f"data.files.test={dump}").data), "test")
    named = jsonl(tmp_path / "named.jsonl", [{"messages": CHAT, "id": "a"}, {"messages": CHAT, "id": "a"}])
    with pytest.raises(DataFormatError, match=r"record 2: field 'id': a unique record id") as refused:
        read_split(data_spec(compose("data=custom", f"data.files.train={named}").data), "train")
    # identical records with their own id: data.duplicates does not take them, and the advice says so
    assert "data.duplicates=drop" not in str(refused.value) and "an id of its own" in str(refused.value)


def test_the_benchmark_readers_apply_the_policy(tmp_path):
    conversation = {"conversations": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]}
    path = jsonl(tmp_path / "rolemrc.jsonl", [conversation, conversation])
    options = RoleMRCOptions(task_dimensions=None)
    assert (
        len(readers.read("rolemrc", "train", path, options, replace(readers.STRICT, duplicates="drop")).examples) == 1
    )
    assert (
        len(readers.read("rolemrc", "train", path, options, replace(readers.STRICT, duplicates="keep")).examples) == 2
    )
    with pytest.raises(DataFormatError, match="a unique record id"):
        readers.read("rolemrc", "train", path, options)  # a caller naming no policy is strict


def test_an_unknown_policy_is_a_named_error(compose, dump):
    cfg = compose("data=custom", f"data.files.train={dump}", "data.duplicates=maybe")
    with pytest.raises(ConfigError, match=r"data.duplicates='maybe': expected one of drop, keep, error"):
        validate(cfg)
    with pytest.raises(ConfigError, match=r"data.duplicates='maybe': expected one of drop, keep, error"):
        data_spec(cfg.data)  # the data stage's settings, parsed alone
    with pytest.raises(ConfigError, match=r"data.duplicates: one of drop, keep, error, got 'maybe'"):
        replace(readers.STRICT, duplicates="maybe")  # a reader's policy checks it too
