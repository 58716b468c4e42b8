"""MMRole: reference metrics per scenario; judged by MMRole-Eval (eight metrics, each a score pair of the
evaluated answer against the ground truth) in the official answers/reviews/results layout.

``evaluator.reviews=<dir>`` aggregates existing reviews and ``evaluator.answers=<dir>`` judges existing
answers, both without generating.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rpbench.data.files import image_root
from rpbench.data.records import EvalExample
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, as_container


class MMRole(Benchmark):
    judged = True

    def from_files(self, cfg: DictConfig, out_dir: Path) -> dict[str, Any] | None:
        ev = cfg.evaluator
        if not (ev.get("reviews") or ev.get("answers")):
            return None
        results = {"mmrole_eval": mmrole_eval(cfg, out_dir, Path(str(ev.answers)) if ev.get("answers") else None)}
        results["report_sections"] = mmrole_sections(results["mmrole_eval"])
        return results

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
        results["mmrole_eval"] = mmrole_eval(cfg, out_dir, write_answers(examples, predictions, out_dir))

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
        """Not judged (judge=none): the answers still go to answers/ in the official layout, to judge later."""
        if "mmrole_eval" not in results:
            results["mmrole_answers"] = write_answers(examples, predictions, out_dir).name

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        if "mmrole_answers" in results:
            return [
                "## MMRole-Eval\n\nNot judged (judge=none): reference metrics only. The answers are in "
                f"`{results['mmrole_answers']}/` (MMRole's official layout); judge them with `python run.py "
                f"objective=none evaluator=mmrole evaluator.answers=<this run>/{results['mmrole_answers']} "
                "judge=<backend>`."
            ]
        return mmrole_sections(results["mmrole_eval"]) if "mmrole_eval" in results else []


def write_answers(examples: Sequence[EvalExample], predictions: Mapping[str, str], out_dir: Path) -> Path:
    """The run's answers in MMRole's official answers layout (one <scenario>_test.json per scenario)."""
    answers = out_dir / "answers"
    answers.mkdir(parents=True, exist_ok=True)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for e in examples:
        user = e.prompt[-1].content
        system = e.prompt[0].content if e.prompt[0].role == "system" else ""
        by_file.setdefault(f"{e.task}_test.json", []).append(
            {
                "id": e.id,
                "system": system,
                "image": e.meta.get("image"),
                "role": e.meta.get("role"),
                "script": e.meta.get("script"),
                "other_role": e.meta.get("other_role"),
                "conversations": [
                    {"from": "user", "value": user},
                    {"from": "assistant", "value": e.reference, "answer": predictions[e.id]},
                ],
            }
        )
    for name, records in by_file.items():
        (answers / name).write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")
    return answers


def mmrole_eval(cfg: DictConfig, out_dir: Path, answers: Path | None) -> dict[str, Any]:
    """Aggregate ``evaluator.reviews``, or judge ``answers`` into reviews/; official CSVs in results/."""
    from rpbench.eval.mmrole_eval import aggregate_reviews, judge_answers, write_results_csvs

    ev = cfg.evaluator
    if ev.get("reviews"):
        results = aggregate_reviews(Path(str(ev.reviews)))
    else:
        from rpbench.scoring.judge import open_judge

        with open_judge(as_container(cfg.judge)) as client:
            results = judge_answers(
                answers,
                client,
                out_dir / "reviews",
                swap=bool(ev.swap),
                image_root=image_root(cfg.data),
            )
    results["csv_files"] = [p.name for p in write_results_csvs(results, out_dir / "results")]
    return results


def mmrole_sections(results: Mapping[str, Any]) -> list[str]:
    """MMRole-Eval's scores per answers file (MMRole Table 5 style) and its unscored judgements."""
    metrics = results["metrics"]
    lines = [
        "## MMRole-Eval (score = evaluated / ground truth)",
        "",
        "| file | n | " + " | ".join(metrics) + " | overall |",
        "| --- | --- |" + " --- |" * (len(metrics) + 1),
    ]
    for name, entry in results["files"].items():
        means = entry["means"]
        cells = [means[m] for m in metrics] + [entry["overall"]]
        lines.append(
            f"| {name} | {entry['count']} | " + " | ".join("–" if v is None else f"{v:.4f}" for v in cells) + " |"
        )
    failures = sum(
        sum(e["parse_failures"].values()) + sum(e["request_failures"].values()) for e in results["files"].values()
    )
    lines += ["", f"Unscored judgements (parse or request failures, not counted as 0): {failures}"]
    return ["\n".join(lines)]


BENCHMARKS.register("mmrole")(MMRole())
