"""A corpus of malformed files per container format (JSON Lines, JSON list, Parquet), built here and fed to
every reader of every split: each gives a DataFormatError naming file, record and field, never another
exception; and what is well formed but unusual (a byte-order mark) is read."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.mmrole.reader import MMRoleOptions
from rpbench.data.rolemrc import RoleMRCOptions

CHAT = [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "Holmes."}]
GOOD = {  # one valid record per (format, split), the base the corpus damages
    ("custom", "train"): {"messages": CHAT},
    ("custom", "pairs"): {"prompt": "Who are you?", "chosen": "Holmes.", "rejected": "No one."},
    ("custom", "test"): {"messages": CHAT},
    ("rolemrc", "train"): {"id": "a", "conversations": CHAT},
    ("rolemrc", "pairs"): {"id": "a", "prompt": CHAT[:1], "chosen": "Holmes.", "rejected": "No one."},
    ("rolemrc", "test"): {"id": "a", "question": CHAT[:1], "reference": "Holmes.", "task": "t"},
}
MMROLE = {
    "id": "a",
    "system": "You are Holmes.",
    "image": "x.jpg",
    "role": "Holmes",
    "script": "A detective.",
    "other_role": "a visitor",
    "conversations": [{"from": "user", "value": "Who are you?"}, {"from": "assistant", "value": "Holmes."}],
}
GOOD[("mmrole", "train")] = GOOD[("mmrole", "test")] = MMROLE
PREFIX = {"mmrole": "comment_"}  # MMRole's test files are named after their scenario
DEEP = 100_000


@pytest.fixture(scope="module")
def options(data_options):
    """Each format's reader options."""
    return {
        "rolemrc": RoleMRCOptions(task_dimensions={"t": ("style",)}),
        "custom": data_options("custom"),
        "mmrole": MMRoleOptions(image_root=None, default_system=None, per_turn_samples=False),
    }


def _text_corpus(good: dict) -> dict[str, bytes]:
    line = json.dumps(good).encode()
    return {
        "invalid_json_line.jsonl": line + b"\n{not json\n",
        "truncated_line.jsonl": line[:-5] + b"\n",
        "non_object_lines.jsonl": b"[1, 2]\n42\n",
        "invalid_utf8.jsonl": line[:-1] + b', "x": "\xff\xfe"}\n',
        "lone_surrogate.jsonl": line[:-1] + b', "x": "\\ud800"}\n',
        "deeply_nested.jsonl": b"[" * DEEP + b"]" * DEEP + b"\n",
        "empty.jsonl": b"\n\n",
        "bom_then_garbage.jsonl": b"\xef\xbb\xbf{oops\n",
        "list_of_scalars.json": b'["a", 1, null]',
        "bom_list_of_scalars.json": b'\xef\xbb\xbf["a"]',
        "damaged_list.json": b"[" + line + b", {",
        "deep_list.json": b"[" + b"[" * DEEP + b"]" * DEEP + b"]",
        "wrong_types.jsonl": json.dumps({key: 7 for key in good}).encode() + b"\n",
        "empty_strings.jsonl": json.dumps(_strings(good, lambda _: "")).encode(),
        "empty_lists.jsonl": json.dumps({k: [] if isinstance(v, list) else "" for k, v in good.items()}).encode(),
    }


def _strings(value, change):
    """``value`` with ``change`` applied to every string value (not key)."""
    if isinstance(value, dict):
        return {key: _strings(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [_strings(item, change) for item in value]
    return change(value) if isinstance(value, str) else value


def _parquet_corpus(folder: Path, good: dict) -> list[Path]:
    paths = []
    damaged = folder / "damaged.parquet"
    damaged.write_bytes(b"PAR1 not really parquet")
    paths.append(damaged)
    binary = folder / "binary.parquet"
    pq.write_table(pa.Table.from_pylist([_strings(good, str.encode)]), binary)
    paths.append(binary)
    return paths


def _named(error: DataFormatError, path: Path) -> bool:
    text = str(error)
    return text.startswith(f"{path}: record ") and "field '" in text and error.field and error.problem


@pytest.mark.parametrize(("format", "split"), sorted(GOOD))
def test_every_malformed_file_is_a_named_error(tmp_path, format, split, options):
    good = GOOD[(format, split)]
    files = []
    for name, content in _text_corpus(good).items():
        files.append(tmp_path / f"{PREFIX.get(format, '')}{name}")
        files[-1].write_bytes(content)
    if format == "custom":
        files += _parquet_corpus(tmp_path, good)
    for path in files:
        with pytest.raises(DataFormatError) as caught:  # any other exception fails the test
            readers.read(format, split, path, options[format])
        assert _named(caught.value, path), (path.name, str(caught.value))


@pytest.mark.parametrize(("format", "split"), sorted(GOOD))
@pytest.mark.parametrize("container", ["jsonl", "json"])
def test_a_byte_order_mark_is_read_like_any_utf8_file(tmp_path, format, split, container, options):
    good = GOOD[(format, split)]
    body = json.dumps([good]) if container == "json" else json.dumps(good) + "\n"
    (tmp_path / "plain").mkdir(), (tmp_path / "marked").mkdir()
    name = f"{PREFIX.get(format, '')}data.{container}"
    plain, marked = tmp_path / "plain" / name, tmp_path / "marked" / name
    plain.write_text(body, encoding="utf-8")
    marked.write_text(body, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    read = readers.read(format, split, marked, options[format]).examples
    assert read == readers.read(format, split, plain, options[format]).examples and len(read) == 1
