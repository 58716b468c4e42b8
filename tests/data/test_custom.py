"""data=custom: record shapes detected from real JSON, JSON Lines and Parquet files; column and role mapping;
errors naming file, record and field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers
from rpbench.data.prepare import read_split
from rpbench.data.records import Turn
from rpbench.data.settings import data_spec

SYSTEM, USER, ASSISTANT = "You are Sherlock Holmes.", "Where do you live?", "At 221B Baker Street."
TURNS = (Turn("system", SYSTEM), Turn("user", USER), Turn("assistant", ASSISTANT))
OPENAI = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": USER},
    {"role": "assistant", "content": ASSISTANT},
]
SHAREGPT = [{"from": "system", "value": SYSTEM}, {"from": "human", "value": USER}, {"from": "gpt", "value": ASSISTANT}]


def jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def parquet(path: Path, records: list) -> Path:
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


@pytest.fixture
def read(data_options):
    """``path`` read by data=custom's ``split`` reader, with ``options`` over the config's format options."""

    def read(split: str, path, on_error="raise", **options):
        policy = replace(readers.STRICT, on_error=on_error)
        return readers.read("custom", split, path, data_options("custom", **options), policy)

    return read


@pytest.fixture
def custom_options(group_values):
    """data=custom's format options with ``changes`` in place of its values (not merged into them)."""

    def custom_options(**changes):
        return data_spec({**group_values("data", "custom", "data"), **changes}).options

    return custom_options


def test_openai_messages_jsonl_train_and_test(tmp_path, read):
    path = jsonl(tmp_path / "chats.jsonl", [{"messages": OPENAI}, {"messages": OPENAI[1:], "task": "address"}])
    train = read("train", path)
    assert [e.turns for e in train.examples] == [TURNS, TURNS[1:]]
    assert train.examples[1].meta == {"task": "address"} and train.examples[0].meta == {}
    assert train.summary()["shape"] == "messages (messages: role/content)"
    test = read("test", path)
    first, second = test.examples
    assert first.prompt == TURNS[:2] and first.reference == ASSISTANT  # the last assistant turn is the reference
    assert first.task == "chats" and second.task == "address"  # no label: the file's name, one group
    assert first.meta["dimensions"] == [] == second.meta["dimensions"]
    labelled = read("test", path, task_dimensions={"address": ["role_style"]})
    assert [e.meta["dimensions"] for e in labelled.examples] == [[], ["role_style"]]


def test_sharegpt_json_list_detected_and_mapped_like_llamafactory(tmp_path, read):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"conversations": SHAREGPT, "id": "a"}, {"conversations": SHAREGPT[1:], "id": 7}]))
    detected = read("train", path)
    assert [e.turns for e in detected.examples] == [TURNS, TURNS[1:]] and [e.id for e in detected.examples] == [
        "a",
        "7",
    ]
    assert detected.summary()["shape"] == "messages (conversations: from/value)"
    tags = {
        "role_tag": "from",
        "content_tag": "value",
        "user_tag": "human",
        "assistant_tag": "gpt",
        "system_tag": "system",
    }
    mapped = read("train", path, columns={"messages": "conversations"}, tags=tags)
    assert [e.turns for e in mapped.examples] == [TURNS, TURNS[1:]]


def test_own_column_and_role_names(tmp_path, read):
    dialog = [
        {"speaker": "Narrator", "text": SYSTEM},
        {"speaker": "Q", "text": USER},
        {"speaker": "A", "text": ASSISTANT},
    ]
    path = jsonl(tmp_path / "own.jsonl", [{"dialog": dialog, "uid": "x1", "kind": "address"}])
    options = {
        "columns": {"messages": "dialog", "id": "uid", "task": "kind"},
        "tags": {
            "role_tag": "speaker",
            "content_tag": "text",
            "user_tag": "Q",
            "assistant_tag": "A",
            "system_tag": "Narrator",
        },
    }
    (example,) = read("test", path, **options).examples
    assert example.id == "x1" and example.prompt == TURNS[:2] and example.reference == ASSISTANT
    assert example.task == "address"
    with pytest.raises(DataFormatError) as error:  # ShareGPT's role names are not these tags
        other = jsonl(
            tmp_path / "other.jsonl", [{"dialog": [{"speaker": "human", "text": USER}], "uid": "x", "kind": "a"}]
        )
        read("train", other, **options)
    assert str(error.value) == (
        f"{other}: record 1: field 'dialog[0].speaker': one of narrator, q, a (any case), got 'human'"
    )
    with pytest.raises(ConfigError, match=r"data.columns.conversation: unknown key.*; valid keys: chosen, completion"):
        read("train", path, columns={"conversation": "dialog"})


def test_prompt_completion_parquet_standard_and_conversational(tmp_path, read):
    standard = parquet(tmp_path / "pc.parquet", [{"prompt": USER, "completion": ASSISTANT, "system": SYSTEM}])
    train = read("train", standard, columns={"system": "system"})
    assert train.examples[0].turns == TURNS and train.summary()["shape"] == "prompt/completion (strings)"
    (example,) = read("test", standard).examples  # without the system column mapped, no system turn
    assert example.prompt == (TURNS[1],) and example.reference == ASSISTANT
    conversational = parquet(tmp_path / "conv.parquet", [{"prompt": OPENAI[:2], "completion": OPENAI[2:]}])
    train = read("train", conversational)
    assert train.examples[0].turns == TURNS
    assert train.summary()["shape"] == "prompt/completion (conversational: message lists)"
    assert read("test", conversational).examples[0].reference == ASSISTANT


def test_preference_pairs_standard_jsonl_and_conversational_parquet(tmp_path, read):
    rejected = "I live in Paris."
    standard = jsonl(tmp_path / "pairs.jsonl", [{"prompt": USER, "chosen": ASSISTANT, "rejected": rejected}])
    (pair,) = read("pairs", standard).examples
    assert pair.prompt == (TURNS[1],) and (pair.chosen, pair.rejected) == (ASSISTANT, rejected)
    conversational = parquet(
        tmp_path / "pairs.parquet",
        [{"prompt": OPENAI[:2], "chosen": OPENAI[2:], "rejected": [{"role": "assistant", "content": rejected}]}],
    )
    result = read("pairs", conversational)
    assert result.examples[0].prompt == TURNS[:2] and result.examples[0].rejected == rejected
    assert result.summary()["shape"] == "prompt/chosen/rejected (conversational: message lists)"
    with pytest.raises(DataFormatError, match=r"pairs.jsonl: record 1: field '<record>': messages or prompt/comp"):
        read("train", standard)
    with pytest.raises(DataFormatError, match=r"record 0: field 'chosen': one assistant message, got 2 messages"):
        read("pairs", parquet(tmp_path / "two.parquet", [{"prompt": USER, "chosen": OPENAI[1:], "rejected": "x"}]))


def test_hub_dataset_through_datasets_load_dataset(tmp_path, read):
    """`hf://<name>[:<split>]` goes to datasets.load_dataset(name, split=...); here a local dataset folder."""
    folder = tmp_path / "hub"
    folder.mkdir()
    parquet(folder / "train.parquet", [{"messages": OPENAI}])
    parquet(folder / "test.parquet", [{"messages": OPENAI[1:]}])  # a dataset's splits share their columns
    assert read("train", f"hf://{folder}").examples[0].turns == TURNS
    (example,) = read("test", f"hf://{folder}").examples  # split test by default for the test file
    assert example.prompt == TURNS[1:2] and example.reference == ASSISTANT and example.task == "hub"
    assert read("test", f"hf://{folder}:train").examples[0].prompt == TURNS[:2]
    with pytest.raises(FileNotFoundError, match=r"could not load dataset .* split 'validation'"):
        read("test", f"hf://{folder}:validation")


def test_mixed_shapes_unknown_shapes_and_skip_counting(tmp_path, read):
    mixed = jsonl(tmp_path / "mixed.jsonl", [{"messages": OPENAI}, {"prompt": USER, "completion": ASSISTANT}])
    with pytest.raises(DataFormatError) as error:
        read("train", mixed)
    assert str(error.value) == (
        f"{mixed}: record 2: field '<record>': one record shape per file: messages (messages: role/content) "
        "as record 1, got prompt/completion (strings)"
    )
    forms = jsonl(
        tmp_path / "forms.jsonl",
        [{"prompt": USER, "completion": ASSISTANT}, {"prompt": OPENAI[1:2], "completion": "x"}],
    )
    with pytest.raises(DataFormatError, match=r"record 2: .*got prompt/completion \(conversational: message lists\)"):
        read("train", forms)
    unknown = jsonl(tmp_path / "unknown.jsonl", [{"messages": OPENAI}, {"text": "hello"}, {"messages": OPENAI[1:]}])
    with pytest.raises(
        DataFormatError, match=r"record 2: field '<record>': one of the record shapes .*got keys \['text'\]"
    ):
        read("train", unknown)
    skipped = read("train", unknown, on_error="skip")
    assert skipped.summary()["read"] == 2 and skipped.summary()["skipped"] == 1
    ends_on_user = jsonl(tmp_path / "open.jsonl", [{"messages": OPENAI[:2]}])
    with pytest.raises(
        DataFormatError, match=r"record 1: field 'messages': a conversation ending on an assistant turn"
    ):
        read("test", ends_on_user)
    only_reply = jsonl(tmp_path / "reply.jsonl", [{"messages": OPENAI[2:]}])
    with pytest.raises(DataFormatError, match=r"field 'messages': a user turn before the last assistant turn"):
        read("test", only_reply)


def test_records_without_id_are_named_by_content_and_repeats_are_errors(tmp_path, read):
    path = jsonl(tmp_path / "dup.jsonl", [{"prompt": USER, "completion": ASSISTANT, "note": 1}] * 2)
    with pytest.raises(DataFormatError, match=r"record 2: field 'id': a unique record id"):
        read("train", path)
    renamed = jsonl(tmp_path / "renamed.jsonl", [{"completion": ASSISTANT, "prompt": USER, "note": 2}])
    assert read("train", renamed).examples[0].id == read("train", path, on_error="skip").examples[0].id


def test_mapping_from_the_command_line_reaches_the_reader(compose, tmp_path):
    dialog = [{"speaker": "Q", "text": USER}, {"speaker": "A", "text": ASSISTANT}]
    path = jsonl(tmp_path / "own.jsonl", [{"dialog": dialog, "persona": SYSTEM}])
    cfg = compose(
        "data=custom",
        f"data.files.train={path}",
        "data.columns.messages=dialog",
        "data.columns.system=persona",
        "data.tags.role_tag=speaker",
        "data.tags.content_tag=text",
        "data.tags.user_tag=Q",
        "data.tags.assistant_tag=A",
    )
    result = read_split(data_spec(cfg.data), "train")
    assert result.examples[0].turns == TURNS and result.summary()["shape"] == "messages (dialog: speaker/text)"
    with pytest.raises(DataFormatError, match=r"own.jsonl: record 1: field '<record>': one of the record shapes"):
        read_split(
            data_spec(compose("data=custom", f"data.files.train={path}").data), "train"
        )  # unmapped: no known column


def test_a_record_holding_two_shapes_is_an_error_not_a_silent_choice(tmp_path, read):
    both = jsonl(tmp_path / "both.jsonl", [{"messages": OPENAI, "prompt": USER, "completion": ASSISTANT}])
    for split in ("train", "test"):
        with pytest.raises(DataFormatError) as error:
            read(split, both)
        assert error.value.record == 1 and error.value.field == "<record>"
        assert "messages and prompt/completion" in error.value.problem
    pair_and_completion = jsonl(
        tmp_path / "pc.jsonl", [{"prompt": USER, "completion": ASSISTANT, "chosen": ASSISTANT, "rejected": "No."}]
    )
    with pytest.raises(DataFormatError, match="prompt/completion and prompt/chosen/rejected"):
        read("pairs", pair_and_completion)


def test_a_mapped_column_missing_from_a_record_is_an_error(tmp_path, read):
    path = jsonl(tmp_path / "chats.jsonl", [{"messages": OPENAI[1:], "persona": SYSTEM}, {"messages": OPENAI[1:]}])
    with pytest.raises(DataFormatError) as error:
        read("train", path, columns={"system": "nonexistent"})
    assert (error.value.record, error.value.field) == (1, "nonexistent")
    assert "data.columns.system=nonexistent" in error.value.problem
    with pytest.raises(DataFormatError, match=r"record 2: field 'persona': required \(data.columns.system=persona"):
        read("train", path, columns={"system": "persona"})
    completions = jsonl(tmp_path / "pc.jsonl", [{"prompt": USER, "completion": ASSISTANT}])
    with pytest.raises(DataFormatError, match=r"field 'label': required \(data.columns.task=label"):
        read("test", completions, columns={"task": "label"})
    # A mapping for another shape (another file of the same config) does not apply to this one.
    assert read("train", completions, columns={"chosen": "better"}).examples[0].turns == TURNS[1:]


def test_openai_content_part_lists_are_read_as_their_text(tmp_path, read):
    parts = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
        {"role": "user", "content": [{"type": "text", "text": "Where do you"}, {"type": "text", "text": "live?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": ASSISTANT}]},
    ]
    path = jsonl(tmp_path / "parts.jsonl", [{"messages": parts}])
    assert read("train", path).examples[0].turns == (
        TURNS[0],
        Turn("user", "Where do you\nlive?"),
        TURNS[2],
    )
    pc = jsonl(tmp_path / "pc.jsonl", [{"prompt": parts[:2], "completion": parts[2:]}])
    assert read("test", pc).examples[0].reference == ASSISTANT
    image = [parts[0], {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]}, parts[2]]
    with pytest.raises(DataFormatError) as error:
        read("train", jsonl(tmp_path / "image.jsonl", [{"messages": image}]))
    assert error.value.field == "messages[1].content[0]" and "'image_url'" in error.value.problem


def test_openai_weight_zero_keeps_a_reply_as_context_only(tmp_path, tiny_model, read):
    from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
    from rpbench.models import load_tokenizer

    chat = [
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "Nobody you know.", "weight": 0},
        {"role": "user", "content": USER},
        {"role": "assistant", "content": ASSISTANT, "weight": 1},
    ]
    [example] = read("train", jsonl(tmp_path / "w.jsonl", [{"messages": chat}])).examples
    assert [t.trained for t in example.turns] == [True, False, True, True]
    tokenizer = load_tokenizer(tiny_model())
    rendered = ChatRenderer(tokenizer, "<|im_end|>", 512).render_conversation(example.turns)
    supervised = [t for t, label in zip(rendered.input_ids, rendered.labels) if label != IGNORE_INDEX]
    assert tokenizer.decode(supervised) == ASSISTANT + "<|im_end|>"  # the weight-0 reply is not trained on
    for bad, field in (
        ({**chat[1], "weight": 0.5}, "messages[1].weight"),
        ({**chat[0], "weight": 0}, "messages[0].weight"),
    ):
        records = [{"messages": [bad, *chat[1:]] if field.startswith("messages[0]") else [chat[0], bad, *chat[2:]]}]
        with pytest.raises(DataFormatError) as error:
            read("train", jsonl(tmp_path / "bad.jsonl", records))
        assert error.value.field == field and "0 or 1 on an assistant message" in error.value.problem
    in_prompt = [{"prompt": [{**chat[0], "weight": 1}], "completion": ASSISTANT}]
    with pytest.raises(DataFormatError, match=r"field 'prompt\[0\].weight': no weight here"):
        read("train", jsonl(tmp_path / "p.jsonl", in_prompt))


def test_mapping_mistakes_are_configuration_errors(tmp_path, read, custom_options):
    path = jsonl(tmp_path / "chats.jsonl", [{"messages": OPENAI}])
    with pytest.raises(ConfigError, match=r"data.columns.speaker: unknown key"):
        read("train", path, columns={"speaker": "who"})
    with pytest.raises(ConfigError, match=r"data.task_dimensions=\['role_style'\]: expected a mapping or null"):
        custom_options(task_dimensions=["role_style"])
    with pytest.raises(ConfigError, match=r"data.task_dimensions.chats=3: expected a list"):
        custom_options(task_dimensions={"chats": 3})
    with pytest.raises(ConfigError, match=r"data.columns.system='': expected null \(ours\) or a column name"):
        read("train", path, columns={"system": ""})


@pytest.mark.slow
def test_a_hub_dataset_whose_endpoint_never_answers_fails_within_the_bound(tmp_path):
    """A real TCP endpoint that accepts and never answers, as HF_ENDPOINT; the read stops at hub_timeout_s."""
    import os
    import socket
    import subprocess
    import sys
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    script = (
        "import sys, time\n"
        "from dataclasses import fields\n"
        "from rpbench.data import readers\n"
        "from rpbench.data.custom import ColumnNames, CustomOptions, MessageTags\n"
        "unset = lambda cls: cls(**{f.name: None for f in fields(cls)})\n"
        "options = CustomOptions(hub_timeout_s=3, columns=unset(ColumnNames), record_shape=None, "
        "tags=unset(MessageTags), task_dimensions=None)\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    readers.read('custom', 'train', 'hf://someone/chats', options)\n"
        "except FileNotFoundError as error:\n"
        "    print(f'{time.monotonic() - start:.1f} {error}')\n"
    )
    env = {
        **os.environ,
        "HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    finally:
        silent.close()
    seconds, _, message = done.stdout.strip().partition(" ")
    assert done.returncode == 0 and message, done.stderr[-2000:]
    assert 3 <= float(seconds) < 10 and time.monotonic() - started < 60
    assert "hf://someone/chats: datasets.load_dataset('someone/chats', split='train') did not finish" in message
    assert "data.hub_timeout_s=3s" in message


def test_record_shape_chooses_among_the_shapes_a_record_holds(tmp_path, read):
    both = [{"prompt": USER, "chosen": ASSISTANT, "rejected": "No.", "messages": OPENAI}]
    path = jsonl(tmp_path / "both.jsonl", both)
    with pytest.raises(DataFormatError, match="choose the one to read with data.record_shape"):
        read("pairs", path)
    (pair,) = read("pairs", path, record_shape="prompt/chosen/rejected").examples
    assert pair.prompt == (Turn("user", USER),) and pair.chosen == ASSISTANT
    (chat,) = read("train", path, record_shape="messages").examples
    assert chat.turns == TURNS
    with pytest.raises(DataFormatError, match=r"field '<record>': the record shape \(prompt \+ completion\)"):
        read("train", path, record_shape="prompt/completion")
    with pytest.raises(ConfigError, match="data.record_shape='chat': expected one of messages, "):
        read("train", path, record_shape="chat")


def test_hub_timeout_must_be_a_positive_number(tmp_path, read):
    path = jsonl(tmp_path / "chats.jsonl", [{"messages": OPENAI}])
    refused = {
        "soon": "data.hub_timeout_s='soon': expected a finite number or null",
        0: r"data.hub_timeout_s=0.0: expected a number of seconds > 0",
        True: "data.hub_timeout_s=True: expected a finite number or null",
    }
    for bad, message in refused.items():
        with pytest.raises(ConfigError, match=message):
            read("train", path, hub_timeout_s=bad)
    assert read("train", path, hub_timeout_s=1.5).examples[0].turns == TURNS
