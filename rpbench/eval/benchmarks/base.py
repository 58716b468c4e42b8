"""What a benchmark's evaluation may add to the generic one (``rpbench.eval.evaluate``), and its registry.

``evaluator.name`` picks the registered ``Benchmark``; the generic evaluation lets it prepare the test
records (``prepare_examples``), generates, computes the reference metrics (``evaluator.metrics``) broken
down by the benchmark's ``groupings``, then lets the benchmark judge (when a judge is configured) and
writes the report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rpbench.data.records import EvalExample
from rpbench.registry import Registry

BENCHMARKS = Registry("evaluator")


class Benchmark:
    """A benchmark without a judge protocol whose results are broken down by task label; subclasses
    override what differs."""

    judged = False  # has a judge protocol (judge=<backend> is accepted)

    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        """How results are broken down: grouping -> each record's group (or list of groups)."""
        return {"task": [e.task for e in examples]}

    def prepare_examples(
        self, cfg: DictConfig, examples: Sequence[EvalExample]
    ) -> tuple[list[EvalExample], dict[str, Any]]:
        """The test records as the model is to see them (an ablation may change its input), and what was
        changed, for the results (empty: nothing). Unchanged by default."""
        return list(examples), {}

    def from_files(self, cfg: DictConfig, out_dir: Path) -> dict[str, Any] | None:
        """Results from files named in the evaluator config, without generating (None: generate)."""
        return None

    def prepare_judge(self, cfg: DictConfig) -> Any:
        """What the judge needs, checked before generating (a bad prompt file fails early)."""
        return None

    def judge(
        self,
        cfg: DictConfig,
        examples: Sequence[EvalExample],
        predictions: Mapping[str, str],
        out_dir: Path,
        prepared: Any,
        results: dict[str, Any],
        scores: list[dict[str, Any]],
    ) -> None:
        """Judge the predictions: add the judge's results to ``results`` and each record's to ``scores``."""
        raise ValueError(f"evaluator={cfg.evaluator.name} has no judge protocol: use judge=none")

    def analyze(
        self,
        cfg: DictConfig,
        model: Any,
        tokenizer: Any,
        examples: Sequence[EvalExample],
        predictions: Mapping[str, str],
        out_dir: Path,
        results: dict[str, Any],
    ) -> None:
        """Analyses that need the model after scoring (RPGBench's generalization numbers); none by default."""

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        """Report sections of what this benchmark added to ``results`` (after the generic tables and radar)."""
        return []


def judged_benchmarks() -> list[str]:
    """The registered evaluators with a judge protocol."""
    return [name for name in BENCHMARKS.names() if BENCHMARKS.get(name).judged]


def as_container(node) -> Any:
    """A config node as plain Python (resolved); anything else unchanged."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def source_of(cfg: DictConfig) -> str | None:
    """``prompts.source``: the user's clone of the authors' repository to read their prompts from, or None."""
    source = cfg.prompts.source
    return None if source is None else str(source)
