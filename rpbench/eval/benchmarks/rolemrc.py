"""RoleMRC: reference metrics per task, per dimension (the paper's five) and per rubric; judged on
rpbench's reference-free rubrics, the authors' prompts (``prompts.source``) or ``evaluator.judge_prompt_file``'s
templates; the prompts' origins and sha256 go to metrics.json (``prompts``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.data.records import EvalExample
from rpbench.eval.benchmarks.base import (
    BENCHMARKS,
    Benchmark,
    Headline,
    Judged,
    JudgeTally,
    rouge_l,
    tally_of,
    write_jsonl,
)
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import JudgedSettings
from rpbench.eval.stats import summarize
from rpbench.scoring.judge.rolemrc_rubrics import (
    DEFAULT_PROMPTS,
    dimension_of,
    dimensions_of,
    load_prompts,
    released_prompts,
)


class RoleMRC(Benchmark):
    headlines = (Headline("judge accuracy", ("judge", "overall"), "accuracy", "verdicts"), rouge_l())
    judged = True
    settings_class = JudgedSettings

    def judge_requests(self, settings: JudgedSettings, examples: Sequence[EvalExample]) -> list[int]:
        return [len(e.meta.get("dimensions") or ()) for e in examples]  # one per rubric of the record's label

    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        """``dimension``: the paper's five (Knowledge Boundary, Role Style, Multi-turn, Nested,
        Prioritized); ``rubric``: the finer split a record is judged on (``meta["dimensions"]``); a
        record may sit in several."""
        rubrics = [list(e.meta.get("dimensions", [])) for e in examples]
        return {**super().groupings(examples), "dimension": [dimensions_of(r) for r in rubrics], "rubric": rubrics}

    def prepare_judge(self, ctx: EvalContext):
        """rpbench's reference-free rubrics; the authors' prompts from their clone (``prompts.source``); or
        the templates of ``evaluator.judge_prompt_file`` (checked)."""
        path, source = ctx.settings.judge_prompt_file, ctx.prompts_source
        if path is not None and source is not None:
            raise ConfigError(
                "evaluator.judge_prompt_file and prompts.source both name the RoleMRC judge's prompts: set one"
            )
        if path is not None:
            return load_prompts(path)
        return DEFAULT_PROMPTS if source is None else released_prompts(source)

    def judge(self, ctx: EvalContext, predictions: Mapping[str, str], prepared: Any) -> Judged:
        """The judge's accuracies per rubric, per dimension (the paper's five) and overall, with bootstrap
        CIs, and each record's verdicts by rubric; the judge's replies go to judgements.jsonl."""
        from rpbench.scoring.judge import judge_rolemrc

        judged = judge_rolemrc(
            ctx.examples, predictions, ctx.judge, ctx.settings.judge_max_tokens, prepared, ctx.open_client
        )
        records = judged.pop("records")
        write_jsonl(ctx.out_dir / "judgements.jsonl", records)
        bootstrap = ctx.settings.bootstrap.as_kwargs()
        for level, key in (("rubrics", lambda r: r), ("dimensions", dimension_of)):
            for group, tally in judged[level].items():
                verdicts = [v for rec in records for r, v in rec["verdicts"].items() if key(r) == group]
                tally.update({k: summarize(verdicts, **bootstrap)[k] for k in ("ci_low", "ci_high")})
        results = {"judge": judged, "prompts": dict(prepared.records)}
        return Judged(results, {rec["id"]: rec["verdicts"] for rec in records})

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        return tally_of(results["judge"]["overall"]) if "judge" in results else None


BENCHMARKS.register("rolemrc")(RoleMRC())
