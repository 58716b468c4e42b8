"""The RPGBench recipes' data options: reasoning in the target (Thinking recipes) and an augmentation file (DA)."""

from __future__ import annotations

import json

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data.prepare import read_split
from rpbench.data.settings import data_spec
from rpbench.pipeline import read_data

AUGMENT = "pkg://rpbench/resources/sample/rpgbench/augment.json"
N_AUGMENT = 6


@pytest.fixture(scope="module")
def with_reasoning(sample_dir):
    """The bundled sample with a reasoning text per training sample (none for ``drop``)."""

    def with_reasoning(tmp_path, drop: str | None = None):
        document = json.loads((sample_dir / "rpgbench" / "rpgbench.json").read_text(encoding="utf-8"))
        for sample in document["IDTrain"]:
            if sample["sample_ID"] != drop:
                sample["reasoning"] = f"Answer {sample['dialogue_context'][-1]['user_query']!r} in character."
        path = tmp_path / "rpgbench_reasoning.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        return path

    return with_reasoning


def test_reasoning_is_off_by_default_and_trained_before_the_response_when_on(compose, tmp_path, with_reasoning):
    path = with_reasoning(tmp_path)
    plain = read_split(data_spec(compose("data=sample_rpgbench", f"data.files.train={path}").data), "train").examples
    thinking = compose("data=sample_rpgbench", f"data.files.train={path}", "data.reasoning_in_target=true").data
    trained = read_split(data_spec(thinking), "train").examples
    first = plain[0]
    assert first.turns[-1].content.startswith("Once, Lena, a knight left a dragon's egg on my doorstep.")
    assert trained[0].turns[-1].content == (
        "<think>\nAnswer \"What's the strangest thing you've ever seen?\" in character.\n</think>\n\n"
        + first.turns[-1].content
    )
    assert [e.turns[:-1] for e in trained] == [e.turns[:-1] for e in plain]  # the prompts are unchanged
    test = read_split(data_spec(thinking), "test").examples  # references stay the golden responses
    assert not any("<think>" in e.reference for e in test)


def test_a_test_sample_trained_with_its_reasoning_still_counts_as_overlap(compose, tmp_path, sample_dir):
    document = json.loads((sample_dir / "rpgbench" / "rpgbench.json").read_text(encoding="utf-8"))
    document["IDTrain"] = [{**document["IDTest"][0], "sample_ID": "leak", "reasoning": "Greet the guest."}]
    path = tmp_path / "leaky.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    cfg = compose("data=sample_rpgbench", f"data.files.train={path}", "data.reasoning_in_target=true")
    with pytest.raises(ValueError, match=r"1 data.files.train records also appear in data.files.test.*leak"):
        read_data(data_spec(cfg.data), "train", need_test=True)


def test_reasoning_in_target_without_reasoning_names_file_record_and_field(compose, tmp_path, with_reasoning):
    path = with_reasoning(tmp_path, drop="IDTrain-007")
    data = compose("data=sample_rpgbench", f"data.files.train={path}", "data.reasoning_in_target=true").data
    with pytest.raises(
        DataFormatError, match=r"rpgbench_reasoning\.json: record IDTrain\[6\].*IDTrain-007.*'reasoning'"
    ):
        read_split(data_spec(data), "train")
    skipped = read_split(
        data_spec(
            compose(
                "data=sample_rpgbench",
                f"data.files.train={path}",
                "data.reasoning_in_target=true",
                "data.on_error=skip",
            ).data
        ),
        "train",
    )
    assert len(skipped.examples) == 29 and len(skipped.skipped) == 1


def test_augmentation_file_is_read_with_the_training_reader_and_counted_apart(compose):
    cfg = compose("data=sample_rpgbench", f"data.files.augment={AUGMENT}")
    splits, report = read_data(data_spec(cfg.data), "train", need_test=False)
    assert report["train"]["read"] == 30 and report["augment"]["read"] == N_AUGMENT
    assert report["augment"]["path"] == AUGMENT and report["augment_test_overlap"] == 0
    assert [e.id for e in splits["augment"]] == [f"AUG-{n:03d}" for n in range(1, N_AUGMENT + 1)]
    assert splits["augment"][1].turns[-1].content.startswith("Two silver coins, Tomas")
    assert (
        "augment" not in read_data(data_spec(compose("data=sample_rpgbench").data), "train", need_test=False)[0]
    )  # off by default


def test_augmentation_reusing_a_training_id_is_an_error(compose, tmp_path, sample_dir):
    document = json.loads((sample_dir / "rpgbench" / "augment.json").read_text(encoding="utf-8"))
    document["IDTrain"][2]["sample_ID"] = "IDTrain-004"
    path = tmp_path / "clash.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"clash\.json: record IDTrain-004: field 'id'.*1 ids are in both"):
        read_data(
            data_spec(compose("data=sample_rpgbench", f"data.files.augment={path}").data), "train", need_test=False
        )


@pytest.mark.slow
def test_data_augmentation_run_trains_on_both_files_and_reports_them(tmp_path, run_in_process):
    out = tmp_path / "run"
    run_in_process(
        out,
        "data=sample_rpgbench",
        "model=tiny-qwen3",
        f"data.files.augment={AUGMENT}",
        "evaluator=none",
        "objective.epochs=1",
        "save_model=false",
        "trainer.enable_progress_bar=false",
    )
    metrics = json.loads((out / "metrics.json").read_text())
    records, samples = metrics["records"], metrics["train"]["samples"]
    assert records["augment"]["read"] == N_AUGMENT and records["train"]["read"] == 30
    assert samples["train"] + samples["val"] == 30 + N_AUGMENT and samples["val"] >= 1  # held out: IDTrain only
    assert metrics["run_name"] == "sft-tiny-qwen3-sample_rpgbench-augment"
    assert "Augmentation records also in the test split: 0" in (out / "report.md").read_text()
