"""Extending rpbench from outside its files: a toy data format, metric and evaluator registered here, with
their configs in a config folder of the test's own (``hydra.searchpath``), used by a real pipeline run."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from omegaconf import open_dict

from rpbench import pipeline
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    FormatOptions,
    ReadPolicy,
    Source,
    read_file,
    record_id,
    require_str,
)
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.benchmarks import BENCHMARKS, Benchmark
from rpbench.scoring.metrics import METRICS
from rpbench.validate import validate

TOY_TEST = [
    {"id": "q1", "question": "Say hi.", "answer": "hi"},
    {"id": "q2", "question": "Name a colour, as a pirate would, in a few words.", "answer": "red, arr"},
    {"id": "q3", "question": "Count to three.", "answer": "one two three"},
]


def read_toy_test(path, options: FormatOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    """{"id", "question", "answer"} records, one user turn each (the format has no keys of its own)."""

    def parse(raw, source: Source) -> EvalExample:
        rid, source = record_id(raw, "id", source)
        question = require_str(raw, "question", source)
        return EvalExample(rid, (Turn("user", question),), require_str(raw, "answer", source), "toy", {})

    return read_file(path, parse, policy.on_error)


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    return [float(p.strip() == r.strip()) for p, r in zip(predictions, references)]


class ToyBench(Benchmark):
    def groupings(self, examples):
        return {
            **super().groupings(examples),
            "length": [f"{len(e.prompt[-1].content.split())} words" for e in examples],
        }

    def report_sections(self, results):
        return [f"## Toy bench\n\n{results['n_records']} questions"]


@pytest.fixture(autouse=True)
def toy_extensions(registered):
    with registered(
        (FORMATS, "toy_qa", DataFormat(FormatOptions, test=read_toy_test)),
        (METRICS, "exact_match", exact_match),
        (BENCHMARKS, "toy_bench", ToyBench()),
    ):
        yield


CONFIGS = {
    "data/toy.yaml": (
        "defaults:\n  - common@_here_: default\n  - _self_\nname: toy\nformat: toy_qa\nhf_dataset: null\n"
        "files:\n  test: {test}\nval_fraction: 0.0\nmax_length: 512\nmax_prompt_length: 384\n"
    ),
    "evaluator/toy_bench.yaml": (
        "defaults:\n  - common@_here_: default\n  - _self_\nname: toy_bench\nmetrics: [exact_match, rouge1]\n"
        "generation:\n  max_new_tokens: 4\n"
    ),
}


@pytest.mark.slow
def test_a_format_metric_and_evaluator_added_by_the_test_are_used_by_a_run(compose, tmp_path):
    test_file = tmp_path / "toy.jsonl"
    test_file.write_text("".join(json.dumps(r) + "\n" for r in TOY_TEST))
    conf = tmp_path / "conf"
    for name, text in CONFIGS.items():
        (conf / name).parent.mkdir(parents=True, exist_ok=True)
        (conf / name).write_text(text.format(test=test_file))
    cfg = compose(f"hydra.searchpath=[file://{conf}]", "data=toy", "evaluator=toy_bench", "objective=none")
    out = tmp_path / "out"
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(out)

    results = pipeline.run(validate(cfg))

    assert results["records"]["test"]["read"] == len(TOY_TEST)
    predictions = {row["id"]: row["prediction"] for row in map(json.loads, (out / "predictions.jsonl").open())}
    expected = [float(predictions[r["id"]].strip() == r["answer"]) for r in TOY_TEST]
    scores = [json.loads(line) for line in (out / "scores.jsonl").open()]
    assert [s["metrics"]["exact_match"] for s in scores] == expected
    summary = results["eval"]["metrics"]
    assert summary["overall"]["exact_match"]["n"] == len(TOY_TEST)
    assert summary["overall"]["exact_match"]["mean"] == pytest.approx(sum(expected) / len(expected))
    assert sorted(summary["length"]) == ["11 words", "2 words", "3 words"]
    assert list(summary["length"]["2 words"]) == ["exact_match", "rouge1"]
    assert "## Toy bench\n\n3 questions" in results["eval"]["report_sections"]
    assert "## Toy bench" in (out / "report.md").read_text()
