"""What a benchmark's evaluation may add to the generic one (``rpbench.eval.evaluate``), and its registry.

``evaluator.name`` picks the registered ``Benchmark``; the generic evaluation lets it prepare the test
records (``prepare_examples``), generates, computes the reference metrics (``evaluator.metrics``) broken
down by the benchmark's ``groupings``, then lets the benchmark judge (when a judge is configured) and
writes the report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.registry import Registry
from rpbench.core.typed import Settings
from rpbench.data.records import EvalExample
from rpbench.data.settings import DataSettings
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import EvaluatorSettings
from rpbench.models.settings import ModelSettings
from rpbench.scoring.chat.client import EndpointSettings
from rpbench.scoring.judge.parties import Overlap, Party

BENCHMARKS = Registry("evaluator")


@dataclass(frozen=True)
class Judged:
    """A benchmark's judging: what goes into the results, and each judged record's verdicts by rubric."""

    results: dict[str, Any]
    verdicts: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Headline:
    """A benchmark's leaderboard number (``rpbench.leaderboard``). ``path`` leads from metrics.json's ``eval`` to
    a mapping holding it under ``value`` (and its CI under ``ci_low``/``ci_high`` when computed), or to the
    number itself (``value`` empty). ``scores``: how a record's score is read from scores.jsonl for CIs and
    paired tests: ``metrics/<name>``, or ``verdicts`` (each verdict of the record is one unit); empty: none.
    ``needs``: what a run needs for its results to hold this headline (the console says so when they do not)."""

    label: str
    path: tuple[str, ...]
    value: str = "mean"
    scores: str = ""
    higher_is_better: bool = True
    needs: str = ""

    def held(self, results: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, Any] | None:
        """(the entry the path leads to when it is a mapping, the number or None in it) when ``results`` hold
        this headline's entry; None when they do not (another headline, or a setting this run left out)."""
        entry: Any = results
        for key in self.path:
            if not isinstance(entry, Mapping) or key not in entry:
                return None
            entry = entry[key]
        if not self.value:
            return None, entry
        return (entry, entry.get(self.value)) if isinstance(entry, Mapping) else None

    def unscored(self, results: Mapping[str, Any]) -> bool:
        """Whether ``results`` hold this headline's entry without a number in it (nothing was scored)."""
        found = self.held(results)
        return found is not None and found[1] is None

    def console_line(self, results: Mapping[str, Any]) -> str | None:
        """``<label> <value> [CI]`` (or ``<label>: no value``) when ``results`` hold this headline."""
        found = self.held(results)
        if found is None:
            return None
        entry, value = found
        if value is None:
            return f"{self.label}: no value"
        ci = entry and entry.get("ci_low") is not None and entry.get("ci_high") is not None
        return f"{self.label} {value:.4f}" + (f" [{entry['ci_low']:.4f}, {entry['ci_high']:.4f}]" if ci else "")


@dataclass(frozen=True)
class JudgeTally:
    """How a benchmark's judgements went: ``n`` asked, ``parse_failures`` unparsed, ``request_failures``
    unanswered (the evaluation warns and fails on these the same way for every judged benchmark)."""

    n: int
    parse_failures: int
    request_failures: int


def tally_of(overall: Mapping[str, Any]) -> JudgeTally:
    """A judge's overall tally as RoleMRC's and RPGBench's judging write it (``n``, ``parse_failures``,
    ``request_failures``)."""
    return JudgeTally(overall["n"], overall["parse_failures"], overall["request_failures"])


def rouge_l() -> Headline:
    return Headline(
        "ROUGE-L", ("metrics", "overall", "rougeL"), scores="metrics/rougeL", needs="rougeL in evaluator.metrics"
    )


class Benchmark:
    """A benchmark without a judge protocol whose results are broken down by task label; subclasses
    override what differs."""

    judged = False  # has a judge protocol (judge=<backend> is accepted)
    reads_records = True  # evaluates the data config's test records (False: brings its own, e.g. lm-eval's tasks)
    settings_class: type[Settings] = EvaluatorSettings  # its ``evaluator`` group, typed (a subclass adds its keys)

    def needs_records(self, settings: Settings) -> bool:
        """Whether this evaluation reads the data config's test records under ``settings``."""
        return self.reads_records

    def needs_judge(self, settings: Settings) -> bool:
        """Whether a configured judge is asked under ``settings`` (its settings are checked at startup)."""
        return self.judged

    def shows_images(self, settings: Settings) -> bool:
        """Whether the generating model (or endpoint) is given the test records' images under ``settings``."""
        return True

    needs_model = True  # evaluates a model (False: judges or measures files and records alone)

    def evaluates_model(self, settings: Settings) -> bool:
        """Whether this evaluation evaluates the run's model under ``settings`` (False: it judges or measures
        files and records alone, and the pipeline loads no model for it): ``needs_model`` by default."""
        return self.needs_model

    headlines: tuple[Headline, ...] = ()  # its leaderboard number: the first of these a run's results hold
    no_headline = "it declares no headline"  # why a benchmark without headlines ranks no model (the console's)

    def headline_line(self, results: Mapping[str, Any]) -> str:
        """The console's headline of ``results``: the first of ``headlines`` they hold, with its CI; else why
        there is none (the headlines' ``needs``)."""
        if not self.headlines:
            return f"none ({self.no_headline})"
        found = next((line for h in self.headlines if (line := h.console_line(results)) is not None), None)
        if found is not None:
            return found
        needs = (f"{h.label} needs {h.needs or 'what this run left out'}" for h in self.headlines)
        return f"none ({'; '.join(needs)})"

    def summary_lines(self, results: Mapping[str, Any]) -> list[str]:
        """What the console shows of ``results`` besides the headline (a number the paper reports beside it, or
        the measure of a benchmark that ranks no model); nothing by default."""
        return []

    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        """How results are broken down: grouping -> each record's group (or list of groups)."""
        return {"task": [e.task for e in examples]}

    def prepare_examples(self, ctx: EvalContext) -> tuple[list[EvalExample], dict[str, Any]]:
        """The test records as the model is to see them (an ablation may change its input), and what was
        changed, for the results (empty: nothing). Unchanged by default."""
        return list(ctx.examples), {}

    def scored_predictions(self, predictions: Mapping[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
        """The text scored of each generated prediction, and what was changed, for the results (empty:
        nothing). The predictions as generated by default."""
        return dict(predictions), {}

    def problems(self, settings: Settings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        """What is wrong between this benchmark's ``settings`` and the run's data and judge (None: judge=none),
        found at startup by validate; its own keys are checked by ``settings_class``. By default: test records
        without references (conversation scenarios), whose replies this benchmark would score against empty text."""
        if self.needs_records(settings) and data.format == "conversation":
            return [
                f"evaluator={settings.name} scores replies against the test records' references, and conversation "
                "scenarios (data.format conversation) have none: evaluator=conversation runs and judges whole sessions"
            ]
        return []

    def overlaps(
        self, settings: Settings, judge: EndpointSettings | None, model: ModelSettings, trained_by: Sequence[Party]
    ) -> list[Overlap]:
        """The parts of this evaluation one model plays twice (``rpbench.scoring.judge.parties``: its judge, a
        user simulator, ``trained_by``: the judges that rewarded the evaluated ``model``'s training), found at
        startup: refused unless allowed, named in the results when allowed. None by default."""
        return []

    def record_problems(self, settings: Settings, data: DataSettings, examples: Sequence[EvalExample]) -> list[str]:
        """What the test records read lack for this benchmark under ``settings``, found when they are read (before
        any model loads or generates), each naming the data file; none by default."""
        return []

    def from_files(self, ctx: EvalContext) -> dict[str, Any] | None:
        """Results from files named in the evaluator settings, without generating (None: generate)."""
        return None

    def evaluate_model(self, ctx: EvalContext) -> dict | None:
        """Results of a benchmark that runs the whole evaluation its own way (lm-eval's tasks, multi-turn
        interviews) instead of one generation per test record; None: the generic evaluation."""
        return None

    def judge_requests(self, settings: Settings, examples: Sequence[EvalExample]) -> list[int]:
        """How many requests each test record costs the judge's endpoint, each counted once (for the estimate
        against ``judge.budget``): its judgements, and a simulated user's or interviewer's messages; one."""
        return [1] * len(examples)

    def reaskable_requests(self, settings: Settings, examples: Sequence[EvalExample]) -> list[int]:
        """How many of each record's ``judge_requests`` are re-asked while unreadable, up to
        ``judge.parse_tries`` attempts in all (the estimate's ``reasks``): all of them."""
        return self.judge_requests(settings, examples)

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        """How its judgements in ``results`` went (None: it asked no judge). A judged benchmark says where its
        counts are."""
        return None

    def prepare_judge(self, ctx: EvalContext) -> Any:
        """What the judge needs, checked before generating (a bad prompt file fails early)."""
        return None

    def judge(self, ctx: EvalContext, predictions: Mapping[str, str], prepared: Any) -> Judged:
        """The judge's results, and each record's verdicts by rubric."""
        raise ValueError(f"evaluator={ctx.settings.name} has no judge protocol: use judge=none")

    def analyze(self, ctx: EvalContext, predictions: Mapping[str, str], results: Mapping[str, Any]) -> dict[str, Any]:
        """Results of analyses that need the model after scoring (RPGBench's generalization numbers), given
        the results so far; none by default."""
        return {}

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        """Report sections of what this benchmark added to ``results`` (after the generic tables and radar)."""
        return []


def judged_benchmarks() -> list[str]:
    """The registered evaluators with a judge protocol."""
    return [name for name in BENCHMARKS.names() if BENCHMARKS.get(name).judged]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
