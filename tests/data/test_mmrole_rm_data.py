"""The paper's reward-model data (format ``mmrole_rm``): GPT-4's evaluations in Qwen-VL-Chat's finetuning
format, one sample per response and metric, read from the bundled RM_data sample and from broken copies."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers
from rpbench.data.mmrole.prompts import JUDGE_SYSTEM, METRICS
from rpbench.data.mmrole.rm import ReviewerOptions
from rpbench.data.prepare import read_split
from rpbench.data.records import EvalExample, SFTExample
from rpbench.data.settings import data_spec

REPO_ROOT = Path(__file__).resolve().parents[2]

SAMPLE = REPO_ROOT / "rpbench" / "resources" / "sample" / "mmrole_rm"
IMAGES = REPO_ROOT / "rpbench" / "resources" / "sample" / "mmrole" / "images"


def read(split, path, on_error="raise"):
    options = ReviewerOptions(image_root=str(IMAGES), reference_judge="GPT-4")
    return readers.read("mmrole_rm", split, path, options, replace(readers.STRICT, on_error=on_error))


def test_each_record_is_one_metric_of_one_response():
    raw = json.loads((SAMPLE / "RM-test.json").read_text())
    test = read("test", SAMPLE / "RM-test.json")
    assert len(test.examples) == len(raw) == 16 and all(isinstance(e, EvalExample) for e in test.examples)
    assert test.counts["system_filled"] == 16  # no record has a system prompt: the judge's is used
    for record, example in zip(raw, test.examples, strict=True):
        user, answer = record["conversations"]
        system, prompt = example.prompt
        assert (system.role, system.content) == ("system", JUDGE_SYSTEM)
        image = user["value"].split("<img>")[1].split("</img>")[0]
        assert prompt.image == str(IMAGES / image) and "<img>" not in prompt.content
        assert prompt.content == user["value"].split("</img>\n", 1)[1]
        assert example.reference == answer["value"]
        a, b = answer["value"].rsplit("(", 1)[1].rstrip(")").split(", ")
        assert example.meta["score"] == [float(a), float(b)]
        assert example.meta["reference_judge"] == "GPT-4" and example.meta["model"] == "not recorded"
    # the metric is the prompt's aspect line; each response's eight metric samples share one question key
    assert [e.meta["metric"] for e in test.examples] == list(METRICS) * 2
    assert [e.task for e in test.examples] == list(METRICS) * 2
    keys = [e.meta["question"] for e in test.examples]
    assert len(set(keys[:8])) == len(set(keys[8:])) == 1 and keys[0] != keys[8]


def test_training_samples_supervise_the_evaluation():
    train = read("train", SAMPLE / "RM-train.json")
    assert len(train.examples) == 6 * 2 * 8 and all(isinstance(e, SFTExample) for e in train.examples)
    first = json.loads((SAMPLE / "RM-train.json").read_text())[0]
    assert [t.role for t in train.examples[0].turns] == ["system", "user", "assistant"]
    assert train.examples[0].turns[-1].content == first["conversations"][1]["value"]


def copy_with(tmp_path, change):
    records = json.loads((SAMPLE / "RM-test.json").read_text())
    change(records[1])
    path = tmp_path / "RM-test.json"
    path.write_text(json.dumps(records))
    return path


def without_aspect(record):
    user = record["conversations"][0]
    user["value"] = user["value"].replace("Fluency: ", "Fluency - ")


def escaping_image(record):
    user = record["conversations"][0]
    user["value"] = user["value"].replace("<img>", "<img>../../")


def unscored(record):
    record["conversations"][1]["value"] = "Both are fluent, [Scores]: (8, 11)"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (without_aspect, "conversations[0].value"),
        (unscored, "conversations[1].value"),
        (lambda r: r["conversations"].append({"from": "user", "value": "and?"}), "conversations"),
        (escaping_image, "conversations[0].value"),
    ],
)
def test_bad_records_name_file_record_and_field_or_are_skipped_and_counted(tmp_path, change, field):
    path = copy_with(tmp_path, change)
    with pytest.raises(DataFormatError) as error:
        read("test", path)
    assert (error.value.field, str(error.value.path)) == (field, str(path))
    skipped = read("test", path, on_error="skip")
    assert (len(skipped.examples), skipped.summary()["skipped"]) == (15, 1)


def test_who_wrote_the_evaluations_must_be_named(compose):
    with pytest.raises(ConfigError, match="data.reference_judge: missing"):
        data_spec(compose("data=sample_mmrole_rm", "~data.reference_judge").data)


def test_the_recipe_reads_the_papers_file_and_the_sample_config_reads_both_splits(compose):
    paper = compose("experiment=mmrole_reward_model")
    assert (paper.data.format, paper.data.files.train) == ("mmrole_rm", "RM_data/train/RM-train_23k.json")
    assert paper.data.reference_judge == "GPT-4" and paper.data.hf_dataset == "YanqiDai/MMRole_dataset"
    objective = paper.objective  # the authors' finetune/finetune_RM_ds.sh
    assert (objective.lr, objective.epochs, objective.warmup_ratio, objective.weight_decay) == (1e-5, 10, 0.01, 0.05)
    assert (list(objective.adam_betas), objective.scheduler, paper.data.max_length) == ([0.9, 0.95], "cosine", 4096)
    distill = compose("experiment=mmrole_rm_distill")
    assert (distill.data.format, distill.data.reference_judge) == ("mmrole_reviews", "MMRole-Eval_RM")
    assert distill.objective.epochs == 10 and distill.run_name == "mmrole-rm-distill"
    cfg = compose("data=sample_mmrole_rm")
    assert (
        len(read_split(data_spec(cfg.data), "train").examples),
        len(read_split(data_spec(cfg.data), "test").examples),
    ) == (96, 16)
