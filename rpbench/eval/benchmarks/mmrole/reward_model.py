"""MMRole-Eval reward model (``evaluator=mmrole_rm``): how well the run's model, generating reviews for the
held-out samples, agrees with the reference judge: GPT-4 for the paper's reward-model data
(``data=mmrole_rm``), MMRole-Eval_RM for the released reviews (``data=mmrole_reviews``, distillation).

Each prediction is parsed for its ``[Scores]: (a, b)`` pair as ``evaluator.score_parse`` says (``authors``:
as the authors' ``get_review_score`` reads it, no range check; ``strict``: the pair in parentheses, each
score 1-10; ``rpbench.data.mmrole.prompts.SCORE_PARSERS``) and compared with the reference review's pair
(``meta["score"]``): MMRole Tables 4,
9 and 10 (MAE, RMSE, Pearson of a/b per metric and overall), the scoring success rate and Cronbach's alpha
(``rpbench.scoring.agreement``; ``evaluator.parse_failure`` scores an unreadable review). Written:
``rm_agreement.json``, ``rm_scores.jsonl`` (per sample: reference pair, parsed pair or null, the score
counted) and a report section naming the reference judge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rpbench.data.mmrole.prompts import SCORE_PARSERS, review_prompts
from rpbench.data.records import EvalExample
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, write_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import EvaluatorSettings
from rpbench.scoring.agreement import PARSE_FAILURE_POLICIES, ScoredSample, agreement, model_scores

RESULTS_KEY = "rm_agreement"


@dataclass(frozen=True, kw_only=True)
class RewardModelSettings(EvaluatorSettings):
    score_parse: str  # how a review's score pair is read
    parse_failure: str  # how an unreadable review is scored
    fill_seed: int

    def problems(self):
        found = super().problems()
        if self.score_parse not in SCORE_PARSERS:
            found.append(("score_parse", f"one of {', '.join(SCORE_PARSERS)}"))
        if self.parse_failure not in PARSE_FAILURE_POLICIES:
            found.append(("parse_failure", f"one of {', '.join(PARSE_FAILURE_POLICIES)}"))
        return found


class MMRoleRewardModel(Benchmark):
    settings_class = RewardModelSettings
    no_headline = "it measures a reward model's agreement with reference reviews; no role-playing model is ranked"

    def summary_lines(self, results: Mapping[str, Any]) -> list[str]:
        """The overall agreement as the paper's tables give it (success rate, MAE, RMSE, Pearson of a/b)."""
        if RESULTS_KEY not in results:
            return []
        found = results[RESULTS_KEY]
        overall, errors = found["overall"], found["overall"]["ratio"]
        success = "–" if overall["success_rate"] is None else f"{100 * overall['success_rate']:.1f}%"
        return [
            f"agreement with {found['reference_judge']} on {overall['n']} reviews: success {success}, "
            f"MAE {_cell(errors['mae'])}, RMSE {_cell(errors['rmse'])}, Pearson {_cell(errors['pearson'])}"
        ]

    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        unscored = next((e for e in examples if "score" not in e.meta), None)
        if unscored is not None:
            raise ValueError(
                f"evaluator=mmrole_rm compares reviews with reference score pairs: test record {unscored.id!r} has "
                "none (use a reward-model data config: data=mmrole_rm, GPT-4's evaluations, or data=mmrole_reviews)"
            )
        return {"task": [e.task for e in examples], "metric": [e.meta["metric"] for e in examples]}

    def analyze(self, ctx: EvalContext, predictions: Mapping[str, str], results: Mapping[str, Any]) -> dict[str, Any]:
        examples, out_dir = ctx.examples, ctx.out_dir
        policy, seed = ctx.settings.parse_failure, ctx.settings.fill_seed
        samples = scored_samples(examples, predictions, ctx.settings.score_parse)
        found = agreement(samples, metrics_of(examples), policy, seed)
        found["reference_judge"] = reference_judge_of(examples)
        found["score_parse"] = ctx.settings.score_parse
        (out_dir / f"{RESULTS_KEY}.json").write_text(json.dumps(found, indent=2), encoding="utf-8")
        rows = [
            {
                "id": e.id,
                "metric": s.metric,
                "reference": list(s.reference),
                "parsed": s.predicted and list(s.predicted),
                "score_counted": score,
            }
            for e, s, score in zip(examples, samples, model_scores(samples, policy, seed))
        ]
        write_jsonl(out_dir / "rm_scores.jsonl", rows)
        # the prompts: what the held-out prompts were built with
        return {"prompts": review_prompts(ctx.prompts_source).records(), RESULTS_KEY: found}

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        return [agreement_section(results[RESULTS_KEY])] if RESULTS_KEY in results else []


def metrics_of(examples: Sequence[EvalExample]) -> list[str]:
    """The metrics of the held-out samples, in first-seen order (MMRole's order for the release's files)."""
    return list(dict.fromkeys(e.meta["metric"] for e in examples))


def reference_judge_of(examples: Sequence[EvalExample]) -> str:
    """Who wrote the reference reviews (``meta["reference_judge"]``, set by the data reader)."""
    judges = sorted({str(e.meta["reference_judge"]) for e in examples})
    if len(judges) != 1:
        raise ValueError(f"evaluator=mmrole_rm: the held-out samples mix reference judges {judges}")
    return judges[0]


def scored_samples(
    examples: Sequence[EvalExample], predictions: Mapping[str, str], score_parse: str
) -> list[ScoredSample]:
    """Each held-out sample's reference pair and the pair parsed from the model's review (``SCORE_PARSERS``
    [score_parse]; None: unreadable), with the evaluated model and the query (scenario/record id) it answered."""
    parse = SCORE_PARSERS[score_parse]
    return [
        ScoredSample(
            model=e.meta["model"],
            query=f"{e.meta['scenario']}/{e.meta['question']}",
            metric=e.meta["metric"],
            reference=(float(e.meta["score"][0]), float(e.meta["score"][1])),
            predicted=parse(predictions[e.id]),
        )
        for e in examples
    ]


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


FAILURE_WORDS = {
    "random_score": 'gets a seeded random score a/b, uniform in [0, 1) (the paper: "The score is random if the '
    'model fails to score"; evaluator.parse_failure=random_score)',
    "random_pair": "gets a seeded random pair of scores, each uniform from 1 to 10 (evaluator.parse_failure="
    "random_pair; the paper's reading is random_score)",
    "exclude": "is left out (evaluator.parse_failure=exclude; the paper scores it at random)",
}
PARSE_WORDS = {
    "authors": "as the authors' get_review_score reads it (evaluator.score_parse=authors: no range check)",
    "strict": "strictly (evaluator.score_parse=strict: the pair in parentheses, each score 1-10; the authors' "
    "get_review_score reads more)",
}


def _alpha(entry: Mapping[str, Any], unit: str) -> str:
    return f"{_cell(entry['alpha'])} ({entry[unit]} {unit})"


def agreement_section(found: Mapping[str, Any]) -> str:
    """The agreement table (score = a/b of the pair, as MMRole uses it) and Cronbach's alpha, as markdown."""
    judge = found["reference_judge"]
    header = (
        "| metric | n | success | MAE | RMSE | Pearson | MAE (scored) | RMSE (scored) | Pearson (scored) "
        "| MAE raw (scored) |"
    )
    lines = [
        f"## MMRole-Eval reward model: agreement with {judge}",
        "",
        f"Reference reviews written by **{judge}**. Score = a/b of the pair (evaluated answer / ground truth), "
        f"as MMRole scores. Score pairs read {PARSE_WORDS[found['score_parse']]}. The first three columns "
        "follow the paper (Tables 4, 9, 10): a review whose score pair cannot be read "
        f"{FAILURE_WORDS[found['parse_failure']]}; {found['parse_failures']} unreadable, "
        f"seed {found['fill_seed']}. The (scored) columns use the readable samples only; raw = the two scores "
        "of the pair instead of their ratio.",
        "",
        header,
        "| --- " * 10 + "|",
    ]
    groups = [(m, found["per_metric"][m]) for m in found["metrics"]] + [("overall", found["overall"])]
    for name, g in groups:
        counted, scored = g["ratio"], g["scored_only"]["ratio"]
        cells = [
            counted["mae"],
            counted["rmse"],
            counted["pearson"],
            scored["mae"],
            scored["rmse"],
            scored["pearson"],
            g["scored_only"]["raw"]["mae"],
        ]
        success = "–" if g["success_rate"] is None else f"{100 * g['success_rate']:.2f}%"
        lines.append(f"| {name} | {g['n']} | {success} | " + " | ".join(_cell(v) for v in cells) + " |")
    queries, metrics = found["cronbach_alpha"]["queries_as_items"], found["cronbach_alpha"]["metrics_as_items"]
    lines += [
        "",
        "Cronbach's alpha as the paper computes it (items = queries, cases = evaluated models, a model's score on "
        f"a query = the mean of its {len(found['metrics'])} metric scores; over the queries every model was "
        f"scored on): model {_alpha(queries['model'], 'queries')}, {judge} {_alpha(queries['reference'], 'queries')}"
        f" (the paper: 0.70 for MMRole-Eval). With the metrics as items and the answered records as cases: model "
        f"{_alpha(metrics['model'], 'records')}, {judge} {_alpha(metrics['reference'], 'records')}.",
    ]
    return "\n".join(lines)


BENCHMARKS.register("mmrole_rm")(MMRoleRewardModel())
