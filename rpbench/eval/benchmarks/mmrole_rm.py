"""MMRole-Eval reward model (``evaluator=mmrole_rm``): how well the run's model, generating reviews for the
held-out samples of ``data=mmrole_reviews``, agrees with the reference judge (GPT-4 in the release).

Each prediction is parsed for its ``[Scores]: (a, b)`` pair (``parse_score_pair``, as strict as the authors'
``get_review_score``) and compared with the reference review's pair (``meta["score"]``): MMRole Tables 4,
9 and 10 (MAE, RMSE, Pearson of a/b per metric and overall), the scoring success rate and Cronbach's alpha
(``rpbench.scoring.agreement``). Written: ``rm_agreement.json``, ``rm_scores.jsonl`` (per sample: reference
pair, parsed pair or null, the pair used with random fill) and a report section.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rpbench.data.records import EvalExample
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, write_jsonl
from rpbench.scoring.agreement import ScoredSample, agreement, filled
from rpbench.scoring.judge.parse import parse_score_pair

RESULTS_KEY = "rm_agreement"


class MMRoleRewardModel(Benchmark):
    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        unscored = next((e for e in examples if "score" not in e.meta), None)
        if unscored is not None:
            raise ValueError(
                f"evaluator=mmrole_rm compares reviews with reference score pairs: test record {unscored.id!r} has "
                "none (use a data config of format mmrole_reviews, e.g. data=mmrole_reviews)"
            )
        return {"task": [e.task for e in examples], "metric": [e.meta["metric"] for e in examples]}

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
        seed = int(cfg.evaluator.fill_seed)
        samples = scored_samples(examples, predictions)
        found = agreement(samples, metrics_of(examples), seed)
        (out_dir / f"{RESULTS_KEY}.json").write_text(json.dumps(found, indent=2), encoding="utf-8")
        rows = [
            {
                "id": e.id,
                "metric": s.metric,
                "reference": list(s.reference),
                "parsed": s.predicted and list(s.predicted),
                "with_random_fill": list(f),
            }
            for e, s, f in zip(examples, samples, filled(samples, seed))
        ]
        write_jsonl(out_dir / "rm_scores.jsonl", rows)
        results[RESULTS_KEY] = found

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        return [agreement_section(results[RESULTS_KEY])] if RESULTS_KEY in results else []


def metrics_of(examples: Sequence[EvalExample]) -> list[str]:
    """The metrics of the held-out samples, in first-seen order (MMRole's order for the release's files)."""
    return list(dict.fromkeys(e.meta["metric"] for e in examples))


def scored_samples(examples: Sequence[EvalExample], predictions: Mapping[str, str]) -> list[ScoredSample]:
    """Each held-out sample's reference pair and the pair parsed from the model's review (None: unreadable).
    A case is one answered record: the evaluated model's response to one question."""
    return [
        ScoredSample(
            case=f"{e.meta['model']}/{e.meta['scenario']}/{e.meta['question']}",
            metric=e.meta["metric"],
            reference=(float(e.meta["score"][0]), float(e.meta["score"][1])),
            predicted=parse_score_pair(predictions[e.id]),
        )
        for e in examples
    ]


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def agreement_section(found: Mapping[str, Any]) -> str:
    """The agreement table (score = a/b of the pair, as MMRole uses it) and Cronbach's alpha, as markdown."""
    header = (
        "| metric | n | success | MAE | RMSE | Pearson | MAE (scored) | RMSE (scored) | Pearson (scored) "
        "| MAE raw (scored) |"
    )
    lines = [
        "## MMRole-Eval reward model: agreement with the reference judge",
        "",
        "Score = a/b of the pair (evaluated answer / ground truth), as MMRole scores. The first three columns "
        "follow the paper (Tables 4, 9, 10): a review whose score pair cannot be read gets a seeded random pair "
        f'("The score is random if the model fails to score"; {found["random_fills"]} filled, seed '
        f"{found['fill_seed']}). The (scored) columns use the successfully scored samples only; raw = the two "
        "scores of the pair (1-10) instead of their ratio.",
        "",
        header,
        "| --- " * 10 + "|",
    ]
    groups = [(m, found["per_metric"][m]) for m in found["metrics"]] + [("overall", found["overall"])]
    for name, g in groups:
        filled_, scored = g["with_random_fill"]["ratio"], g["scored_only"]["ratio"]
        cells = [
            filled_["mae"],
            filled_["rmse"],
            filled_["pearson"],
            scored["mae"],
            scored["rmse"],
            scored["pearson"],
            g["scored_only"]["raw"]["mae"],
        ]
        success = "–" if g["success_rate"] is None else f"{100 * g['success_rate']:.2f}%"
        lines.append(f"| {name} | {g['n']} | {success} | " + " | ".join(_cell(v) for v in cells) + " |")
    alpha = found["cronbach_alpha"]
    lines += [
        "",
        f"Cronbach's alpha over the {len(found['metrics'])} metrics ({alpha['cases']} answered records): "
        f"model {_cell(alpha['with_random_fill'])} (with random fill), {_cell(alpha['scored_only'])} "
        f"({alpha['scored_only_cases']} records scored on every metric); reference judge {_cell(alpha['reference'])}.",
    ]
    return "\n".join(lines)


BENCHMARKS.register("mmrole_rm")(MMRoleRewardModel())
