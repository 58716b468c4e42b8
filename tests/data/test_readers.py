"""Benchmark readers on good files (bundled samples, the real MMRole files) and on each kind of bad input."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers, rolemrc, rpgbench
from rpbench.data.mmrole import reader as mmrole
from rpbench.data.mmrole.reader import MMRoleOptions
from rpbench.data.records import EvalExample, PreferenceExample, SFTExample
from rpbench.data.rolemrc import RoleMRCOptions

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_MMROLE = REPO_ROOT.parent / "shared" / "data" / "mmrole"
MMROLE = MMRoleOptions(image_root=None, default_system=None, per_turn_samples=False)
SKIP = replace(readers.STRICT, on_error="skip")


@pytest.fixture(scope="module")
def options(rolemrc_options, rpgbench_options):
    """Each format's reader options."""
    return {"rolemrc": rolemrc_options, "mmrole": MMROLE, "rpgbench": rpgbench_options}


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def content_id(record: dict) -> str:
    """The documented id of a record without one: sha256 of its canonical JSON, first 16 hex digits."""
    canonical = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in pairs]


GOOD_SFT = {
    "task": "role_related_dialogue---user_first---no_narration---answer",
    "conversations": turns(("System", "You are Ann."), ("User", "Hi"), ("Assistant", "Hello.")),
}
GOOD_PAIR = {"prompt": turns(("System", "You are Ann."), ("User", "Hi")), "chosen": "Hello.", "rejected": "Go away."}
GOOD_TEST = {
    "task": "role_related_mrc_answer_no_narration",
    "question": turns(("System", "S"), ("User", "Q?")),
    "reference": "A.",
}


def mmrole_record(**changes) -> dict:
    record = {
        "id": "Ann_comment_1",
        "system": "Stay in character.",
        "image": "COCO/x.jpg",
        "role": "Ann",
        "script": "Tales",
        "other_role": "a curious human",
        "conversations": [{"from": "user", "value": "Look!"}, {"from": "assistant", "value": "Lovely."}],
    }
    record.update(changes)
    return record


def rpg_sample(**changes) -> dict:
    sample = {
        "sample_ID": "IDTest-1",
        "user_persona": "Bo, a farmer.",
        "agent_character": {"name": "Cy"},
        "dialogue_context": [{"user_query": "Hi"}, {"agent_response": "Hello, Bo."}, {"user_query": "Bye"}],
        "agent_golden_response": "Farewell, Bo.",
        "subset_tag": "german",
    }
    sample.update(changes)
    return sample


# -- good files -----------------------------------------------------------------------------------------


def test_rolemrc_sample_files_read_completely(sample_dir, rolemrc_options):
    sft = readers.read("rolemrc", "train", sample_dir / "rolemrc" / "train-sft.jsonl", rolemrc_options)
    pairs = readers.read("rolemrc", "pairs", sample_dir / "rolemrc" / "train-rl.jsonl", rolemrc_options)
    test = readers.read("rolemrc", "test", sample_dir / "rolemrc" / "test.jsonl", rolemrc_options)
    for result, path in ((sft, "train-sft.jsonl"), (pairs, "train-rl.jsonl"), (test, "test.jsonl")):
        lines = (sample_dir / "rolemrc" / path).read_text(encoding="utf-8").splitlines()
        assert len(result.examples) == len(lines) and result.skipped == []
    assert all(isinstance(e, SFTExample) and e.turns[-1].role == "assistant" for e in sft.examples)
    assert all(isinstance(e, PreferenceExample) and e.prompt[-1].role == "user" for e in pairs.examples)
    assert all(isinstance(e, EvalExample) and e.prompt[-1].role == "user" for e in test.examples)
    first_sft = json.loads((sample_dir / "rolemrc" / "train-sft.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert sft.examples[0].id == content_id(first_sft)
    free_chat = [e for e in sft.examples if "label_parts" in e.meta]
    assert free_chat and all(set(e.meta["label_parts"]) == set(rolemrc.LABEL_PARTS) for e in free_chat)
    dims = {e.task: e.meta["dimensions"] for e in test.examples}
    assert dims["role_unrelated_mrc_refused_no_narration"] == ["knowledge_boundary.outside", "role_style"]
    assert dims["role_related_mrc_answer_no_narration-refused"] == ["prioritized"]


def test_rolemrc_sft_keeps_roles_and_parses_free_chat_label(tmp_path, rolemrc_options):
    record = {
        "task": "role_related_dialogue---role_first---with_narration---answer",
        "conversations": turns(
            ("SYSTEM", "You are Ann."), ("assistant", "*waves* Hi!"), ("User", "Hi"), ("Assistant", "How are you?")
        ),
    }
    [example] = readers.read(
        "rolemrc", "train", write_jsonl(tmp_path / "a.jsonl", ["", record]), rolemrc_options
    ).examples
    assert [t.role for t in example.turns] == ["system", "assistant", "user", "assistant"]
    assert example.id == content_id(record)
    assert example.meta == {
        "task": record["task"],
        "label_parts": {
            "family": "role_related_dialogue",
            "first_speaker": "role_first",
            "narration": "with_narration",
            "outcome": "answer",
        },
    }


def test_rolemrc_accepts_json_list_and_own_ids(tmp_path, rolemrc_options):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{**GOOD_SFT, "id": "x1"}, GOOD_SFT]), encoding="utf-8")
    assert [e.id for e in readers.read("rolemrc", "train", path, rolemrc_options).examples] == [
        "x1",
        content_id(GOOD_SFT),
    ]


@pytest.mark.parametrize(
    "path",
    sorted(SHARED_MMROLE.glob("*-test_*/*/*.json")) or [None],
    ids=lambda p: str(p.relative_to(SHARED_MMROLE)) if p else "missing",
)
def test_mmrole_real_files(path):
    if path is None:
        pytest.skip(f"shared MMRole data not found at {SHARED_MMROLE}")
    raw = json.loads(path.read_text(encoding="utf-8"))
    result = readers.read("mmrole", "test", path, replace(MMROLE, image_root=str(SHARED_MMROLE / "images")))
    assert result.skipped == [] and len(result.examples) == len(raw) > 0
    scenario = path.name.removesuffix("_test.json")
    for example, record in zip(result.examples, raw, strict=True):
        assert example.id == record["id"] and example.task == scenario
        assert [t.role for t in example.prompt] == ["system", "user"]
        assert example.prompt[1].image == str(SHARED_MMROLE / "images" / record["image"])
        assert example.prompt[1].content == record["conversations"][0]["value"]
        assert example.reference == record["conversations"][1]["value"]
        assert example.meta["answer"] == record["conversations"][1]["answer"]
        assert example.meta["other_role"] == record["other_role"] and example.meta["image"] == record["image"]


def test_mmrole_sample_files(sample_dir):
    root = sample_dir / "mmrole"
    options = replace(MMROLE, image_root=str(root / "images"))
    train = readers.read("mmrole", "train", root / "train.json", options)
    assert len(train.examples) == 40 and train.skipped == []
    multi = [e for e in train.examples if sum(t.role == "assistant" for t in e.turns) > 1]
    assert multi and all(
        [t.image is not None for t in e.turns] == [False, True] + [False] * (len(e.turns) - 2) for e in train.examples
    )
    for scenario in mmrole.SCENARIOS:
        test = readers.read("mmrole", "test", root / f"{scenario}_test.json", options)
        assert len(test.examples) == 8 and {e.task for e in test.examples} == {scenario}
        assert all(Path(e.prompt[1].image).is_file() and "answer" not in e.meta for e in test.examples)


def test_mmrole_scenario_from_the_file_name_and_multi_turn_training(tmp_path):
    path = tmp_path / "answers.json"
    path.write_text(json.dumps([mmrole_record(system="")]), encoding="utf-8")
    with pytest.raises(DataFormatError, match="a name starting with its MMRole scenario"):
        readers.read("mmrole", "test", path, MMROLE)
    path = path.rename(tmp_path / "inter-role_test.json")
    [example] = readers.read("mmrole", "test", path, MMROLE).examples
    assert example.task == "inter-role" and [t.role for t in example.prompt] == ["user"]  # empty system dropped
    assert example.prompt[0].image == "COCO/x.jpg" and "answer" not in example.meta
    long = mmrole_record(
        conversations=[
            {"from": "user", "value": "a"},
            {"from": "assistant", "value": "b"},
            {"from": "user", "value": "c"},
            {"from": "assistant", "value": "d"},
        ]
    )
    del long["system"], long["script"]
    path.write_text(json.dumps([long]), encoding="utf-8")
    [sft] = readers.read("mmrole", "train", path, replace(MMROLE, image_root="imgs")).examples
    assert [(t.role, t.image) for t in sft.turns] == [
        ("user", str(Path("imgs").resolve() / "COCO/x.jpg")),  # resolved: checked to stay inside the root
        ("assistant", None),
        ("user", None),
        ("assistant", None),
    ]
    assert sft.meta == {"image": "COCO/x.jpg", "role": "Ann", "other_role": "a curious human"}


def test_rpgbench_sample_file(sample_dir, data_options, rpgbench_options):
    path = sample_dir / "rpgbench" / "rpgbench.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    test = readers.read("rpgbench", "test", path, rpgbench_options)
    assert test.skipped == [] and len(test.examples) == sum(len(raw[s]) for s in rpgbench.TEST_SPLITS)
    shifts = {(e.meta["split"], e.meta["shift"]) for e in test.examples}
    assert shifts == {
        ("IDTest", "in_distribution"),
        ("OOD1Test", "user"),
        ("OOD2Test", "character"),
        ("OOD3Test", "composition"),
    }
    example = next(e for e in test.examples if e.id == raw["OOD1Test"][0]["sample_ID"])
    source = raw["OOD1Test"][0]
    assert example.task == source["subset_tag"] and example.reference == source["agent_golden_response"]
    assert [t.role for t in example.prompt] == ["system", "user"]  # the released evaluation layout
    user = example.prompt[1].content
    assert f"<persona>{source['user_persona']}</persona>" in user
    assert f"<character>{source['agent_character']}</character>" in user
    assert all(next(iter(d.values())) in user for d in source["dialogue_context"])
    assert [t["content"] for t in example.meta["dialogue"]] == [
        next(iter(d.values())) for d in source["dialogue_context"]
    ]
    train = readers.read("rpgbench", "train", path, rpgbench_options)
    assert len(train.examples) == len(raw["IDTrain"]) and all(e.turns[-1].role == "assistant" for e in train.examples)
    only_ood2 = readers.read("rpgbench", "test", path, data_options("rpgbench", test_splits=["OOD2Test"]))
    assert {e.meta["split"] for e in only_ood2.examples} == {"OOD2Test"}


def test_rpgbench_persona_object_and_training_layout(tmp_path, rpgbench_options):
    path = tmp_path / "b.json"
    persona = {"name": "Bo", "traits": ["calm", "tall"]}
    path.write_text(json.dumps({"IDTrain": [rpg_sample(user_persona=persona)]}), encoding="utf-8")
    [example] = readers.read("rpgbench", "train", path, rpgbench_options).examples
    # the authors insert objects with str(): a persona object appears as its Python repr
    assert f"<persona>{persona}</persona>" in example.turns[1].content
    assert example.meta["subset_tag"] == "german" and example.meta["x"]["user_persona"] == str(persona)
    assert [t.role for t in example.turns] == ["system", "user", "assistant"]


def test_read_rejects_unknown_format_split_and_option(sample_dir, rolemrc_options):
    with pytest.raises(ValueError, match=", ".join(readers.FORMATS.names())):
        readers.read("no_such_format", "train", "x.jsonl", rolemrc_options)
    with pytest.raises(ValueError, match="train, pairs, labelled, test"):
        readers.read("rolemrc", "dev", "x.jsonl", rolemrc_options)
    with pytest.raises(ValueError, match="no 'pairs' split; choose one of train, test"):
        readers.read("mmrole", "pairs", "x.json", MMROLE)
    with pytest.raises(TypeError, match="format 'rolemrc' reads with RoleMRCOptions, got MMRoleOptions"):
        readers.read("rolemrc", "train", sample_dir / "rolemrc" / "train-sft.jsonl", MMROLE)
    with pytest.raises(ValueError, match="on_error must be one of raise, skip"):
        replace(readers.STRICT, on_error="ignore")
    with pytest.raises(ConfigError, match=r"data.task_dimensions=\{\}: expected null or a table of test label"):
        RoleMRCOptions.parse({"task_dimensions": {}}, "data")


def test_missing_file_names_the_path(tmp_path, options):
    missing = tmp_path / "nope" / "train.jsonl"
    for fmt, split in (("rolemrc", "train"), ("mmrole", "test"), ("rpgbench", "test")):
        with pytest.raises(FileNotFoundError, match=str(missing)):
            readers.read(fmt, split, missing, options[fmt])


# -- bad input ----------------------------------------------------------------------------------------

BAD_ROLEMRC = [
    # (split, bad record or raw line, record, field, problem fragment)
    ("train", '{"conversations": [', 2, "<line>", "valid UTF-8 JSON"),
    ("train", {"task": "x"}, 2, "conversations", "required, but the record has no such field"),
    ("train", {"conversations": "hi"}, 2, "conversations", "a list"),
    ("train", {"conversations": []}, 2, "conversations", "non-empty list"),
    ("train", {"conversations": turns(("System", "S"))}, 2, "conversations", "at least one user or assistant"),
    (
        "train",
        {"conversations": turns(("Narrator", "x"), ("Assistant", "y"))},
        2,
        "conversations[0].role",
        "one of system, user, assistant (any case), got 'Narrator'",
    ),
    ("train", {"conversations": turns(("User", "Hi"))}, 2, "conversations", "ending on an assistant turn"),
    (
        "train",
        {"conversations": turns(("User", "Hi"), ("User", "Hey"), ("Assistant", "Yo"))},
        2,
        "conversations[1].role",
        "alternating",
    ),
    (
        "train",
        {"conversations": turns(("User", "Hi"), ("System", "S"), ("Assistant", "Yo"))},
        2,
        "conversations[1].role",
        "only as the first turn",
    ),
    (
        "train",
        {"conversations": turns(("User", " "), ("Assistant", "Yo"))},
        2,
        "conversations[0].content",
        "non-empty string",
    ),
    (
        "train",
        {"conversations": [{"role": "User", "content": 3}, {"role": "Assistant", "content": "y"}]},
        2,
        "conversations[0].content",
        "a string, got an integer",
    ),
    ("train", {"conversations": ["Hi", "Yo"]}, 2, "conversations[0]", "a JSON object"),
    ("train", [1, 2], 2, "<record>", "a JSON object, got a list"),
    ("train", {**GOOD_SFT, "task": "role_related_dialogue---user_first"}, 2, "task", "4 non-empty parts"),
    ("train", {**GOOD_SFT, "task": 7}, 2, "task", "a string"),
    ("train", {**GOOD_SFT, "id": "train-1"}, 2, "id", "unique"),
    (
        "pairs",
        {**GOOD_PAIR, "prompt": turns(("User", "Hi"), ("Assistant", "Yo"))},
        2,
        "prompt",
        "ending on a user turn",
    ),
    (
        "pairs",
        {"prompt": GOOD_PAIR["prompt"], "chosen": "Hello."},
        2,
        "rejected",
        "required, but the record has no such field",
    ),
    ("pairs", {**GOOD_PAIR, "chosen": ""}, 2, "chosen", "non-empty"),
    (
        "test",
        {**GOOD_TEST, "task": "role_related_dialogue---user_first---no_narration---answer"},
        2,
        "task",
        "listed in task_dimensions",
    ),
    (
        "test",
        {k: v for k, v in GOOD_TEST.items() if k != "task"},
        2,
        "task",
        "required, but the record has no such field",
    ),
    (
        "test",
        {**GOOD_TEST, "question": turns(("User", "Q?"), ("Assistant", "A."))},
        2,
        "question",
        "ending on a user turn",
    ),
    ("test", {**GOOD_TEST, "reference": None}, 2, "reference", "a string, got null"),
]


@pytest.mark.parametrize(
    "split,bad,record,field,problem", BAD_ROLEMRC, ids=[f"{c[0]}-{c[3]}-{c[4][:20]}" for c in BAD_ROLEMRC]
)
def test_rolemrc_bad_record_named_by_file_line_and_field(tmp_path, split, bad, record, field, problem, rolemrc_options):
    good = {"train": {**GOOD_SFT, "id": "train-1"}, "pairs": GOOD_PAIR, "test": GOOD_TEST}[split]
    path = write_jsonl(tmp_path / f"{split}.jsonl", [good, bad, {**good, "id": "last"}])
    with pytest.raises(DataFormatError) as caught:
        readers.read("rolemrc", split, path, rolemrc_options)
    error = caught.value
    assert (error.path, error.record, error.field) == (str(path), record, field)
    assert problem in error.problem and str(path) in str(error) and f"record {record}" in str(error)
    skipped = readers.read("rolemrc", split, path, rolemrc_options, SKIP)
    assert len(skipped.examples) == 2 and len(skipped.skipped) == 1 and field in skipped.skipped[0]
    assert skipped.summary()["skipped"] == 1


def test_invalid_utf8_line_is_a_record_error(tmp_path, rolemrc_options):
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(GOOD_SFT).encode() + b"\n\xff\xfe\n")
    with pytest.raises(DataFormatError, match=r"record 2: field '<line>'"):
        readers.read("rolemrc", "train", path, rolemrc_options)
    assert len(readers.read("rolemrc", "train", path, rolemrc_options, SKIP).skipped) == 1


BAD_MMROLE = [
    ({"image": 5}, "image", "a string"),
    ({"role": None}, "role", "a string, got null"),
    ({"other_role": ""}, "other_role", "non-empty"),
    ({"conversations": [{"from": "gpt", "value": "x"}]}, "conversations[0].from", "one of user, assistant"),
    ({"conversations": [{"from": "user", "value": "x"}]}, "conversations", "ending on an assistant turn"),
    ({"conversations": [{"from": "assistant", "value": "x"}]}, "conversations", "a user turn to carry the image"),
    (
        {"conversations": [{"from": "user", "value": "x"}, {"from": "assistant", "value": "y", "answer": 1}]},
        "conversations[1].answer",
        "a string",
    ),
    ({"id": ""}, "id", "non-empty string or integer id"),
]


@pytest.mark.parametrize("change,field,problem", BAD_MMROLE, ids=[c[1] + "-" + c[2][:15] for c in BAD_MMROLE])
def test_mmrole_bad_record_named_by_index_id_and_field(tmp_path, change, field, problem):
    path = tmp_path / "comment_test.json"
    path.write_text(json.dumps([mmrole_record(id="a"), mmrole_record(**{"id": "bad", **change})]), encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        readers.read("mmrole", "test", path, MMROLE)
    error = caught.value
    assert error.path == str(path) and error.field == field and problem in error.problem
    assert error.record == (1 if field == "id" else "1 (id 'bad')")
    result = readers.read("mmrole", "test", path, MMROLE, SKIP)
    assert [e.id for e in result.examples] == ["a"] and len(result.skipped) == 1


@pytest.mark.parametrize(
    "fmt,content",
    [
        ("rolemrc", "\n  \n"),
        ("mmrole", "[]"),
        ("rpgbench", '{"IDTest": [], "OOD1Test": [], "OOD2Test": [], "OOD3Test": []}'),
    ],
)
def test_file_without_records_is_an_error(tmp_path, fmt, content, options):
    path = tmp_path / "comment_test.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match="at least one record"):
        readers.read(fmt, "test", path, options[fmt], SKIP)


def test_mmrole_invalid_json_document_fails_whole_file(tmp_path):
    path = tmp_path / "comment_test.json"
    path.write_text('[{"id": "a",', encoding="utf-8")
    with pytest.raises(DataFormatError, match="record file: field '<document>'"):
        readers.read("mmrole", "test", path, MMROLE, SKIP)


BAD_RPG = [
    ({"subset_tag": "french"}, "subset_tag", "one of"),
    (
        {"dialogue_context": [{"user_query": "Hi"}, {"agent_response": "Hello"}]},
        "dialogue_context",
        "ending on a user query",
    ),
    ({"dialogue_context": [{"agent_response": "Hello"}]}, "dialogue_context[0]", "'user_query'"),
    ({"dialogue_context": [{"user_query": "Hi", "agent_response": "Yo"}]}, "dialogue_context[0]", "not the other key"),
    ({"dialogue_context": []}, "dialogue_context", "non-empty list"),
    ({"agent_character": "Cy"}, "agent_character", "a JSON object"),
    ({"user_persona": 3}, "user_persona", "string or object"),
    ({"agent_golden_response": ""}, "agent_golden_response", "non-empty"),
]


@pytest.mark.parametrize("change,field,problem", BAD_RPG, ids=[c[1] + "-" + c[2][:15] for c in BAD_RPG])
def test_rpgbench_bad_sample_named_by_split_id_and_field(tmp_path, change, field, problem, rpgbench_options):
    path = tmp_path / "rpg.json"
    document = {
        "IDTest": [rpg_sample()],
        "OOD1Test": [rpg_sample(sample_ID="b", **change)],
        "OOD2Test": [],
        "OOD3Test": [],
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        readers.read("rpgbench", "test", path, rpgbench_options)
    error = caught.value
    assert (error.path, error.record, error.field) == (str(path), "OOD1Test[0] (id 'b')", field)
    assert problem in error.problem
    result = readers.read("rpgbench", "test", path, rpgbench_options, SKIP)
    assert [e.id for e in result.examples] == ["IDTest-1"] and len(result.skipped) == 1


def test_rpgbench_missing_split_is_a_file_error(tmp_path, rpgbench_options):
    path = tmp_path / "rpg.json"
    path.write_text(json.dumps({"IDTest": [rpg_sample()], "OOD1Test": {}}), encoding="utf-8")
    with pytest.raises(DataFormatError, match="field 'OOD1Test': a list of samples"):
        readers.read("rpgbench", "test", path, rpgbench_options, SKIP)
    with pytest.raises(DataFormatError, match="field 'IDTrain': a list of samples \\(missing"):
        readers.read("rpgbench", "train", path, rpgbench_options)
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(DataFormatError, match="an object mapping split names"):
        readers.read("rpgbench", "test", path, rpgbench_options)
