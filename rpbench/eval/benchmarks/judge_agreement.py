"""``evaluator=judge_agreement``: a judge's verdicts against human ratings (``rpbench.scoring.human_agreement``),
and the same beside the scores of any judged run that names ``evaluator.human_ratings``.

The judge's verdicts (``evaluator.judge_verdicts``) are read from a verdicts file (JSON Lines,
``rpbench.scoring.human_ratings``), a judged run's folder (its scores.jsonl verdicts; the judge named in its
config.yaml), or an MMRole reviews folder (``*.json`` with ``rm_review``: each metric's a/b, and the swapped
order's when ``rm_review_swapped`` is there; items keyed by the folder's name as the evaluated model).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, read_jsonl
from rpbench.eval.benchmarks.mmrole.judging import review_ratios
from rpbench.eval.context import EvalContext
from rpbench.scoring.chat.client import EndpointSettings
from rpbench.scoring.human_agreement import LEVELS, HumanItem, JudgeVerdict, Key, agreement, model_family
from rpbench.scoring.human_ratings import ratings_file_problems, read_human_ratings, read_judge_verdicts

log = logging.getLogger(__name__)


def run_verdicts(scores: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """(record id, rubric) -> the record's verdict on it (several, e.g. both orders of each judge: their mean)."""
    out = {}
    for row in scores:
        for rubric, verdict in (row.get("verdicts") or {}).items():
            values = [v for v in (verdict if isinstance(verdict, list) else [verdict]) if v is not None]
            if values:
                out[str(row["id"]), str(rubric)] = sum(values) / len(values)
    return out


def matched(humans: Sequence[HumanItem], by_record: Mapping[tuple[str, str], float]) -> dict[Key, JudgeVerdict]:
    """Verdicts keyed as the human items are (a run's records have no evaluated-model key)."""
    return {h.key: JudgeVerdict(by_record[h.key[:2]]) for h in humans if h.key[:2] in by_record}


def judge_verdicts(source: Path, pairwise: bool) -> tuple[dict[Key, JudgeVerdict], str | None]:
    """The verdicts in ``source`` (see the module docstring) and the judge's model name when it says."""
    if source.is_file():
        return read_judge_verdicts(source, pairwise), None
    if (source / "scores.jsonl").is_file():
        config = yaml.safe_load((source / "config.yaml").read_text()) if (source / "config.yaml").is_file() else {}
        return run_verdicts(read_jsonl(source / "scores.jsonl")), ((config or {}).get("judge") or {}).get("model")
    if sorted(source.glob("*.json")):
        return {
            (rid, metric, source.name): JudgeVerdict(ratio, swapped)
            for (rid, metric), (ratio, swapped) in review_ratios(source).items()
        }, None
    raise FileNotFoundError(f"evaluator.judge_verdicts={source}: no verdicts file, run folder or MMRole reviews folder")


def agreement_with(
    humans: Sequence[HumanItem], verdicts: Mapping[Key, JudgeVerdict], level: str, judge_model: str | None
) -> dict[str, Any]:
    found = agreement(humans, verdicts, level, model_family(judge_model) if judge_model else None)
    return {"judge": judge_model, **found}


def _f(value: Any) -> str:
    return "–" if value is None else f"{value:.4f}"


def agreement_section(found: Mapping[str, Any]) -> str:
    lines = [
        f"## Judge agreement with human ratings (judge `{found['judge']}`)",
        "",
        f"{found['n_compared']} of {found['n_human_items']} rated items have a verdict ({found['level']} scale; "
        f"{found['n_without_verdict']} without, {found['n_verdicts_without_humans']} verdicts without ratings).",
    ]
    if not found["n_compared"]:
        return "\n".join(lines + (["", f"**Warning:** {found['warning']}"] if found.get("warning") else []))
    kappa, alpha, bias = found["cohen_kappa"], found["krippendorff_alpha"], found["bias"]
    rows = {
        "Spearman": found["spearman"],
        "Kendall tau-b": found["kendall_tau_b"],
        "MAE / RMSE vs the humans' mean": f"{_f(found['mae'])} / {_f(found['rmse'])}",
        f"accuracy vs majority label ({found['n_without_majority']} items without one)": found["accuracy"],
        "Cohen's kappa (unweighted / linear / quadratic)": " / ".join(_f(kappa[k]) for k in kappa),
        "Krippendorff's alpha (humans / humans and judge)": f"{_f(alpha['humans'])} / {_f(alpha['humans_and_judge'])}",
        f"position bias: swap consistency ({bias['position']['n']} items)": bias["position"]["swap_consistency"],
        f"length bias: Spearman judge / humans ({bias['length']['n']} items)": (
            f"{_f(bias['length']['judge_spearman'])} / {_f(bias['length']['humans_spearman'])}"
        ),
    }
    self_pref = bias["self_preference"]
    if self_pref:
        rows[f"self-preference ({self_pref['judge_family']}, {self_pref['n_own']} own items)"] = self_pref[
            "excess_over_humans"
        ]
    lines += ["", "| statistic | value |", "| --- | --- |"]
    lines += [f"| {k} | {v if isinstance(v, str) else _f(v)} |" for k, v in rows.items()]
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class JudgeAgreementSettings(Settings):
    """conf/evaluator/judge_agreement.yaml: people's ratings against a judge's verdicts, both from files."""

    name: str
    metrics: tuple[str, ...]
    human_ratings: str | None
    judge_verdicts: str | None
    judge_model: str | None
    human_level: str
    human_scale: tuple[float, float] | None  # [low, high] of pointwise ratings (null: pairwise ones)

    def problems(self):
        found = [(key, "a file (required)") for key in ("human_ratings", "judge_verdicts") if not getattr(self, key)]
        if self.human_level not in LEVELS:
            found.append(("human_level", f"one of {', '.join(LEVELS)}"))
        if self.human_ratings and not Path(self.human_ratings).is_file():
            found.append(("human_ratings", "an existing file of human ratings"))
        elif self.human_ratings:
            found += ratings_file_problems(self.human_ratings, self.human_scale, pairwise_allowed=True)
        return found


class JudgeAgreement(Benchmark):
    reads_records = False
    needs_model = False
    settings_class = JudgeAgreementSettings
    no_headline = "it measures a judge against human ratings; no model is scored"

    def from_files(self, ctx: EvalContext) -> dict[str, Any]:
        ev = ctx.settings
        humans = read_human_ratings(ev.human_ratings)
        verdicts, named = judge_verdicts(Path(ev.judge_verdicts), humans[0].pairwise)
        found = agreement_with(humans, verdicts, ev.human_level, ev.judge_model or named)
        if not found["n_compared"]:
            raise ConfigError(
                f"evaluator.human_ratings={ev.human_ratings} and evaluator.judge_verdicts={ev.judge_verdicts} share "
                f"no item: {found['warning']}"
            )
        return {"judge_agreement": found, "report_sections": [agreement_section(found)]}


def human_agreement_of_run(
    settings: Any, judge: EndpointSettings, scores: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A judged run's verdicts (scores.jsonl rows) against ``evaluator.human_ratings``."""
    humans = read_human_ratings(settings.human_ratings)
    if humans[0].pairwise:
        raise ConfigError(
            f"evaluator.human_ratings={settings.human_ratings}: pairwise ratings; a run's verdicts are scores "
            "(use evaluator=judge_agreement with a verdicts file for pairwise judges)"
        )
    by_record = run_verdicts(scores)
    found = agreement_with(humans, matched(humans, by_record), settings.human_level, judge.model)
    if found.get("warning"):
        log.warning("judge agreement with %s: %s", settings.human_ratings, found["warning"])
    return found


BENCHMARKS.register("judge_agreement")(JudgeAgreement())
