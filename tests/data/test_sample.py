"""The bundled sample data: reproducible, small, covering every label and tag, and learnable."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rpbench.data import readers, rpgbench
from rpbench.data.rolemrc import FREE_CHAT, ON_SCENE
from scripts.sample_data import CHARACTERS, SAMPLE_DIR, STATIC, write_sample

REPO_ROOT = Path(__file__).resolve().parents[2]
TASK_DIMENSIONS = OmegaConf.load(REPO_ROOT / "conf" / "data" / "rolemrc.yaml").task_dimensions
SHARED_MMROLE = REPO_ROOT.parent / "shared" / "data" / "mmrole"


def jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (SAMPLE_DIR / "rolemrc" / name).read_text(encoding="utf-8").splitlines()]


def test_regeneration_gives_identical_bytes(tmp_path):
    written = {p.relative_to(tmp_path) for p in write_sample(tmp_path)}
    bundled = {p.relative_to(SAMPLE_DIR) for p in SAMPLE_DIR.rglob("*.json*")}
    bundled = {p for p in bundled if not any(p.is_relative_to(folder) for folder in STATIC)}
    assert written == bundled
    for relative in written:
        assert (tmp_path / relative).read_bytes() == (SAMPLE_DIR / relative).read_bytes(), relative


def test_size_and_counts():
    assert sum(p.stat().st_size for p in SAMPLE_DIR.rglob("*") if p.is_file()) < 1.5 * 2**20
    assert 180 <= len(jsonl("train-sft.jsonl")) <= 220 and 50 <= len(jsonl("train-rl.jsonl")) <= 70
    assert len(jsonl("test.jsonl")) == 72


def test_rolemrc_covers_every_label():
    test_labels = Counter(r["task"] for r in jsonl("test.jsonl"))
    assert set(test_labels) == set(TASK_DIMENSIONS) and min(test_labels.values()) >= 4
    train = jsonl("train-sft.jsonl")
    train_labels = {r["task"] for r in train}
    assert set(FREE_CHAT) | set(ON_SCENE) | set(TASK_DIMENSIONS) <= train_labels
    assert {"user_first", "role_first"} == {label.split("---")[1] for label in train_labels if "---" in label}
    n_assistant = Counter(
        sum(t["role"] == "Assistant" or t["role"] == "assistant" for t in r["conversations"]) for r in train
    )
    assert n_assistant[1] > 50 and sum(v for k, v in n_assistant.items() if k > 1) > 30
    systems = [r["conversations"][0]["content"] for r in train]
    assert any("You must not answer any question about a passage" in s for s in systems)  # prioritized rule
    assert any("You must wrap your whole reply in square brackets" in s for s in systems)  # nested format rule
    assert any("You love to mention" in s for s in systems)  # nested content rule
    pairs = jsonl("train-rl.jsonl")
    assert {r["task"] for r in pairs} == set(TASK_DIMENSIONS)
    assert sum(sum(t["role"] == "assistant" for t in r["prompt"]) > 0 for r in pairs) == 8  # multi-turn pairs


def test_rolemrc_responses_are_learnable():
    records = jsonl("test.jsonl") + [
        {"task": r["task"], "question": r["conversations"][:-1], "reference": r["conversations"][-1]["content"]}
        for r in jsonl("train-sft.jsonl")
        if "---" not in r["task"]
    ]
    for record in records:
        label, reference = record["task"], record["reference"]
        if "_with_narration" in label:
            assert re.match(r"\[?\*[^*]+\* ", reference), reference
        else:
            assert "*" not in reference, reference
        char = next(c for c in CHARACTERS if c.name in record["question"][0]["content"])
        if label in ("role_related_mrc_answer_no_narration", "role_related_mrc_answer_no_narration-special-content"):
            answer = reference.removeprefix(char.opener + " ").split(char.closer)[0].strip()
            assert answer in record["question"][1]["content"], (answer, record)  # copied from the passage
        if label == "role_related_mrc_refused_no_narration":
            assert reference == char.refuse_unknown  # fixed in-character phrasing
        if label == "role_related_mrc_answer_no_narration-refused":
            assert reference == char.refuse_priority
        voice = char.opener.split()[0].strip(",.").lower()  # every line opens with the character's mark
        assert re.sub(r"^\[?(\*[^*]+\* )?", "", reference).lower().startswith(voice), reference


def test_rolemrc_pairs_differ_in_behaviour():
    for pair in jsonl("train-rl.jsonl"):
        assert pair["chosen"] != pair["rejected"] and pair["prompt"][-1]["role"] == "user"


def test_mmrole_records_match_the_official_schema():
    keys = {"id", "system", "image", "conversations", "role", "script", "other_role"}
    if SHARED_MMROLE.is_dir():
        official = json.loads((SHARED_MMROLE / "in-test_answers" / "gpt-4-turbo" / "comment_test.json").read_text())
        assert keys == set(official[0])
    ids = []
    for name in ("train.json", "comment_test.json", "human-role_test.json", "inter-role_test.json"):
        records = json.loads((SAMPLE_DIR / "mmrole" / name).read_text(encoding="utf-8"))
        assert all(set(r) == keys and (SAMPLE_DIR / "mmrole" / "images" / r["image"]).is_file() for r in records)
        assert all(r["other_role"] == "a curious human" for r in records if "role-role" not in r["id"])
        ids += [r["id"] for r in records]
    assert len(ids) == len(set(ids))
    assert (SAMPLE_DIR / "mmrole" / "images" / "LICENSE").read_text().startswith("MIT License")


def test_rpgbench_covers_every_split_and_tag(data_options):
    document = json.loads((SAMPLE_DIR / "rpgbench" / "rpgbench.json").read_text(encoding="utf-8"))
    assert set(document) == {*rpgbench.TRAIN_SPLITS, *rpgbench.TEST_SPLITS} and len(document["IDTrain"]) >= 20
    tags = Counter(s["subset_tag"] for split in rpgbench.TEST_SPLITS for s in document[split])
    assert set(tags) == set(rpgbench.SHIFTS) and min(tags.values()) >= 3
    test = readers.read(
        "rpgbench", "test", SAMPLE_DIR / "rpgbench" / "rpgbench.json", data_options("sample_rpgbench")
    ).examples
    by_split = {e.meta["split"]: e.meta["shift"] for e in test}
    assert by_split == {
        "IDTest": "in_distribution",
        "OOD1Test": "user",
        "OOD2Test": "character",
        "OOD3Test": "composition",
    }


@pytest.mark.parametrize("name", ["train-sft.jsonl", "train-rl.jsonl", "test.jsonl"])
def test_rolemrc_system_prompt_second_sentence_is_the_rule(name):
    """RoleMRC's judge reads a nested rule as the system prompt's second sentence (split on '. ')."""
    for record in jsonl(name):
        turns = record.get("conversations") or record.get("question") or record["prompt"]
        if "-special-" in record["task"]:
            second = turns[0]["content"].split(". ")[1]
            assert second.startswith("You "), second
            assert "You know all about" not in second, second
