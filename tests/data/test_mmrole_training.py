"""MMRole training data as the paper trains on it: one sample per character turn, only that turn supervised;
the released file's inline images; the default system prompt; In-Test and Out-Test read in one run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers
from rpbench.data.mmrole import reader as mmrole
from rpbench.data.mmrole.reader import MMRoleOptions
from rpbench.data.prepare import read_split, train_val_split
from rpbench.data.records import SFTExample, Turn
from rpbench.data.settings import data_spec
from rpbench.models.loading import load_tokenizer
from rpbench.objectives.sft import SFTModule

DEFAULT_SYSTEM = "Stay in character."


def dialogue(rid: str = "d", n_turns: int = 3, **changes) -> dict:
    conversations = []
    for n in range(1, n_turns + 1):
        conversations += [{"from": "user", "value": f"question {n}"}, {"from": "assistant", "value": f"reply {n}"}]
    return {"id": rid, "image": "COCO/x.jpg", "role": "Ann", "conversations": conversations, **changes}


def read(path: Path, split="train", image_root=None, default_system=None, per_turn_samples=False, on_error="raise"):
    """``path`` read by the mmrole format's ``split`` reader with these options."""
    root = None if image_root is None else str(image_root)
    options = MMRoleOptions(image_root=root, default_system=default_system, per_turn_samples=per_turn_samples)
    return readers.read("mmrole", split, path, options, replace(readers.STRICT, on_error=on_error))


def write(tmp_path: Path, records: list, name: str = "train.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_one_sample_per_character_turn_with_only_that_turn_supervised(tmp_path):
    path = write(tmp_path, [dialogue("multi", system="Be Ann."), dialogue("single", n_turns=1)])
    samples = read(path, image_root=tmp_path, per_turn_samples=True).examples
    assert [(s.id, len(s.turns), s.supervise) for s in samples] == [
        ("multi#1", 3, "last"),
        ("multi#2", 5, "last"),
        ("multi#3", 7, "last"),
        ("single", 2, "last"),  # a single-turn dialogue keeps its id
    ]
    third = samples[2]
    spoken = [f"{kind} {n}" for n in (1, 2, 3) for kind in ("question", "reply")]
    assert [t.content for t in third.turns] == ["Be Ann.", *spoken]
    assert [t.image for t in third.turns] == [None, str((tmp_path / "COCO/x.jpg").resolve())] + [None] * 5
    assert third.meta == {"image": "COCO/x.jpg", "role": "Ann", "dialogue": "multi"}
    assert "dialogue" not in samples[3].meta
    whole = read(path, image_root=tmp_path).examples  # without the option: one sample per dialogue
    assert [(s.id, len(s.turns), s.supervise) for s in whole] == [("multi", 7, "all"), ("single", 2, "all")]


def test_a_per_turn_id_that_repeats_another_record_is_an_error(tmp_path):
    path = write(tmp_path, [dialogue("a", n_turns=2), dialogue("a#2", n_turns=1)])
    with pytest.raises(DataFormatError, match=r"record a#2: field 'id'.*'a#2' of this record repeats .* 'a'$"):
        read(path, per_turn_samples=True)


def supervised_text(tokenizer, sample: dict) -> str:
    return tokenizer.decode([label for label in sample["labels"] if label != -100])


def test_last_only_samples_supervise_their_final_reply_alone(tiny_model):
    from rpbench.data.chat import ChatRenderer

    tokenizer = load_tokenizer(tiny_model(chat_template=None))
    renderer = ChatRenderer(tokenizer, "<|im_end|>", 512)
    turns = (
        Turn("system", "Be Ann."),
        Turn("user", "question one"),
        Turn("assistant", "first reply"),
        Turn("user", "question two"),
        Turn("assistant", "second reply"),
    )
    (last, every), empty = SFTModule.render(
        [SFTExample("a#2", turns, supervise="last"), SFTExample("a", turns)], renderer
    )
    assert empty == []
    assert every["input_ids"][: len(last["input_ids"])] == last["input_ids"]  # the same tokens (up to the reply's end)
    assert "second reply" in supervised_text(tokenizer, last) and "first reply" not in supervised_text(tokenizer, last)
    assert "first reply" in supervised_text(tokenizer, every) and "second reply" in supervised_text(tokenizer, every)
    expected = renderer.render_completion(turns[:-1], "second reply")
    assert last["labels"] == expected.labels


def test_inline_images_of_the_released_training_file_move_onto_their_turn(tmp_path):
    record = {
        "id": "qwen-vl",
        "conversations": [
            {"from": "user", "value": "Picture 1: <img>COCO/train2017/1.jpg</img>\nWho is this?"},
            {"from": "assistant", "value": "Me."},
            {"from": "user", "value": "Picture 2: <img>Friends/13.jpg</img>\nAnd here?"},
            {"from": "assistant", "value": "My friends."},
        ],
    }
    [sample] = read(write(tmp_path, [record]), image_root=tmp_path).examples
    assert [(t.content, t.image) for t in sample.turns] == [
        ("Who is this?", str((tmp_path / "COCO/train2017/1.jpg").resolve())),
        ("Me.", None),
        ("And here?", str((tmp_path / "Friends/13.jpg").resolve())),
        ("My friends.", None),
    ]
    assert sample.meta == {"image": "COCO/train2017/1.jpg"}  # the first image names the record's image


BAD_INLINE = [
    ("Picture 1: <img>../../etc/passwd</img>\nhi", "user", "conversations[0].value", "a path inside"),
    ("<img>a.jpg</img><img>b.jpg</img>hi", "user", "conversations[0].value", "at most one image per turn"),
    ("<img>a.jpg hi", "user", "conversations[0].value", "unmatched <img>"),
    ("<img> </img>hi", "user", "conversations[0].value", "empty one"),
    ("Picture 1: <img>a.jpg</img>\n", "user", "conversations[0].value", "text besides the image"),
    ("hi <img>a.jpg</img>", "assistant", "conversations[1].value", "only in user turns"),
    ("hi", "user", "image", "required (or the image inline in a user turn"),
]


@pytest.mark.parametrize("text,where,field,problem", BAD_INLINE, ids=[b[3] for b in BAD_INLINE])
def test_bad_inline_images_name_file_record_and_field(tmp_path, text, where, field, problem):
    user, reply = (text, "fine") if where == "user" else ("hi", text)
    record = {"id": "bad", "conversations": [{"from": "user", "value": user}, {"from": "assistant", "value": reply}]}
    path = write(tmp_path, [dialogue("good", n_turns=1), record])
    with pytest.raises(DataFormatError) as caught:
        read(path, image_root=tmp_path / "images")
    error = caught.value
    assert (error.path, error.record, error.field) == (str(path), "1 (id 'bad')", field)
    assert problem in error.problem
    skipped = read(path, image_root=tmp_path / "images", on_error="skip")
    assert [e.id for e in skipped.examples] == ["good"] and len(skipped.skipped) == 1


def test_records_without_a_system_prompt_get_the_default_and_are_counted(tmp_path):
    records = [dialogue("own", n_turns=2, system="Be Ann."), dialogue("empty", system=" "), dialogue("none")]
    path = write(tmp_path, records)
    result = read(path, default_system=DEFAULT_SYSTEM, per_turn_samples=True)
    systems = {s.id: s.turns[0].content for s in result.examples}
    assert systems == {"own#1": "Be Ann.", "own#2": "Be Ann."} | {
        f"{rid}#{n}": DEFAULT_SYSTEM for rid in ("empty", "none") for n in (1, 2, 3)
    }
    assert (
        result.counts == {"system_filled": 2, "duplicates": 0} and result.summary()["system_filled"] == 2
    )  # records, not samples
    assert read(path).counts == {"duplicates": 0}  # no default: nothing filled, no system turn
    assert read(path).examples[1].turns[0].role == "user"
    test = dict(dialogue("t", n_turns=1, system=""), other_role="a curious human", script="S")
    result = read(write(tmp_path, [test], "comment_test.json"), "test", default_system=DEFAULT_SYSTEM)
    assert result.examples[0].prompt[0] == Turn("system", DEFAULT_SYSTEM) and result.counts == {
        "system_filled": 1,
        "duplicates": 0,
    }


def test_sample_config_reads_in_test_and_out_test_in_one_run(compose):
    data = compose("data=sample_mmrole").data
    result = read_split(data_spec(data), "test")
    sets = [e.meta["test_set"] for e in result.examples]
    assert sets == ["in"] * 24 + ["out"] * 6
    assert {e.task for e in result.examples[24:]} == set(mmrole.SCENARIOS)
    assert result.summary() | {"path": None} == {
        "path": None,
        "read": 30,
        "skipped": 0,
        "first_skipped": [],
        "duplicates": 0,
        "test_set.in": 24,
        "test_set.out": 6,
    }
    limited = read_split(data_spec(compose("data=sample_mmrole", "data.max_test_samples=4").data), "test")
    assert [e.meta["test_set"] for e in limited.examples] == ["in"] * 4 + ["out"] * 4  # the limit is per set
    one = "data.files.test=pkg://rpbench/resources/sample/mmrole/comment_test.json"
    one_file = read_split(data_spec(compose("data=sample_mmrole", one).data), "test")
    assert len(one_file.examples) == 8 and all("test_set" not in e.meta for e in one_file.examples)
    train = read_split(data_spec(data), "train")
    assert all(e.supervise == "last" for e in train.examples) and len(train.examples) > 40  # per-turn by default


def test_test_sets_need_unique_ids_and_belong_to_the_test_split(compose, tmp_path):
    data = compose("data=sample_mmrole").data
    twice = {"in": [data.files.test["in"][0]], "out": [data.files.test["in"][0]]}
    with pytest.raises(DataFormatError, match=r"comment_test\.json: record .*: field 'id': an id unique over all"):
        read_split(data_spec({**data, "files": {"test": twice}}), "test")
    with pytest.raises(ConfigError, match="data.files.train: one file"):
        read_split(data_spec({**data, "files": {"train": {"in": "a.json"}}}), "train")


def test_per_turn_samples_of_one_dialogue_stay_on_one_side_of_the_held_out_split():
    samples = [
        SFTExample(f"d{d}#{n}", (Turn("user", "q"), Turn("assistant", "a")), {"dialogue": f"d{d}"}, "last")
        for d in range(40)
        for n in (1, 2, 3)
    ]
    train, val = train_val_split(samples, 0.25, seed=0)
    sides = {s.meta["dialogue"]: s in val for s in samples}
    assert all((s in val) == sides[s.meta["dialogue"]] for s in samples)
    assert 0 < len(val) < len(samples) and len(val) % 3 == 0
