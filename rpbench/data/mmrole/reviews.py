"""Reward-model samples from MMRole-Eval review files (format ``mmrole_reviews``).

The released ``eval/in-test_reviews`` were written by the released reward model (MMRole-Eval_RM, the
authors' ``eval/RM_review.py``), not by GPT-4: training on them distils that reward model. The paper's
own reward-model data (GPT-4's evaluations) is format ``mmrole_rm`` (``rpbench.data.mmrole.rm``). Option
``reference_judge`` (the data config's) names who wrote the reviews read, in every test sample's ``meta``
and in the agreement report.

Input: a folder of ``<model>/<scenario>_test.json`` review files (every evaluated model), a folder of one
model's ``<scenario>_test.json`` files, or one such file; the evaluated model is the file's folder name.
A review record is an MMRole test record (``rpbench.data.mmrole.reader``) whose ``conversations[1]`` holds the
evaluated ``answer`` next to the ground-truth ``value``, plus ``rm_review``: per metric
``{"review": str, "score": [a, b]}`` (A = evaluated answer, B = ground truth).

Each record gives one sample per metric (as the paper segments each GPT-4 trajectory into eight): the
judge's system turn and its user turn for that metric, built as the authors' ``eval/RM_review.py`` asks the
reward model (question = ``conversations[0].value``, Model A = the answer, Model B = the ground truth),
the record's image on the user turn; the target is the review text. The prompts are rpbench's wording, or
the authors' with ``data.prompts_source`` (their clone; ``rpbench.data.mmrole.prompts.review_prompts``). Train
split: SFTExamples; test split: EvalExamples whose reference is the review text and whose ``meta`` holds
``metric``, ``score`` (the reference pair), ``reference_judge``, ``model``, ``question`` (record id),
``scenario`` and ``image``.

Held-out split (the paper's validation set: 20 questions, the responses of 2 randomly chosen models each,
all 8 metrics = 320 samples): option ``heldout = {questions, models, seed, share_questions}``. A question is a record id
within its scenario; the test split holds the chosen (question, model) responses, the train split every
response to every other question, so no question is in both (the paper kept the other models' responses
to the held-out questions in training: 23,520 - 320 samples; ``heldout.share_questions=true`` does that).
Train and test must read the same reviews for the selection to match.

A review whose ``score`` is not a pair of numbers in [1, 10] (the official scripts write ``{}`` when they
cannot read the pair from the review) is a record error naming file, record and field (under
``on_error=skip`` that sample is skipped and counted). Option ``image_root``: as in
``rpbench.data.mmrole.reader``. Every sample carries its record's image (``data.images=drop`` removes them, counted).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.core.typed import Problem, Settings, as_dict
from rpbench.data.errors import OnError, ReadResult
from rpbench.data.files import confined_path
from rpbench.data.mmrole.prompts import METRICS, ReviewPrompts, review_prompts
from rpbench.data.mmrole.reader import PROFILE_KEYS, scenario_of
from rpbench.data.mmrole.rm import ReviewerOptions
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    ReadPolicy,
    as_object,
    iter_records,
    record_id,
    require,
    require_list,
    require_str,
    type_name,
)
from rpbench.data.records import EvalExample, SFTExample, Turn

REVIEW_KEY = "rm_review"
SCORE_RANGE = (1.0, 10.0)

Question = tuple[str, str]  # (scenario, record id)


@dataclass
class ReviewsReadResult(ReadResult):
    """A ReadResult that also reports the evaluated models, the questions and the held-out selection."""

    models: list[str] = field(default_factory=list)
    questions: int = 0
    heldout: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        return {
            **super().summary(),
            "models": self.models,
            "questions": self.questions,
            "heldout": self.heldout,
        }


@dataclass(frozen=True)
class Reviewed:
    """One review record: a model's answer to a question, and the sample of each metric with a valid review."""

    model: str
    question: Question
    samples: dict[str, tuple[tuple[Turn, Turn], str, tuple[float, float]]]  # metric -> (prompt, review, pair)
    image: str


@dataclass(frozen=True, kw_only=True)
class Heldout(Settings):
    """``data.heldout``: the held-out selection (module docstring)."""

    questions: int
    models: int
    seed: int
    share_questions: bool

    def problems(self) -> list[Problem]:
        return [(key, "an integer >= 0") for key in ("questions", "models", "seed") if getattr(self, key) < 0]


@dataclass(frozen=True, kw_only=True)
class ReviewsOptions(ReviewerOptions):
    """The keys of the ``mmrole_reviews`` format's data configs: the reward-model formats' and the held-out
    selection."""

    heldout: Heldout


def read_train(path: str | Path, options: ReviewsOptions, policy: ReadPolicy) -> ReviewsReadResult:
    """One SFTExample per (review record, metric) of every question outside the held-out selection."""
    return _read(path, options, policy, test=False)


def read_test(path: str | Path, options: ReviewsOptions, policy: ReadPolicy) -> ReviewsReadResult:
    """One EvalExample per (held-out response, metric); ``task`` is the scenario."""
    return _read(path, options, policy, test=True)


def review_files(path: str | Path) -> list[Path]:
    """The review files under ``path`` (itself, its ``*.json`` or its ``*/*.json``), in a stable order."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"review files not found: {p}")
    files = sorted(p.glob("*.json")) + sorted(p.glob("*/*.json"))
    if not files:
        raise FileNotFoundError(f"{p}: no review files (<model>/<scenario>_test.json or <scenario>_test.json)")
    return files


def select_heldout(
    answered: Mapping[Question, list[str]], questions: int, models: int, seed: int
) -> set[tuple[Question, str]]:
    """``questions`` questions drawn (seeded) among those ``models`` or more models answered, and for each
    ``models`` of its models: the held-out (question, model) responses. Independent of file order."""
    eligible = sorted(q for q, who in answered.items() if len(who) >= models)
    if len(eligible) < questions:
        raise ValueError(
            f"heldout.questions={questions}: only {len(eligible)} questions have responses from at least "
            f"heldout.models={models} models ({len(answered)} questions in all); lower them"
        )
    rng = random.Random(seed)
    chosen = sorted(rng.sample(eligible, questions))
    return {(q, m) for q in chosen for m in rng.sample(sorted(answered[q]), models)}


def _read(path: str | Path, options: ReviewsOptions, policy: ReadPolicy, *, test: bool) -> ReviewsReadResult:
    heldout = options.heldout
    result = ReviewsReadResult(str(path))
    reviewed: list[Reviewed] = []
    prompts = review_prompts(policy.prompts_source)
    for file in review_files(path):
        reviewed += _read_file(file, options.image_folder(), policy.on_error, result, prompts)
    answered: dict[Question, list[str]] = {}
    for r in reviewed:
        if r.model in answered.get(r.question, []):
            scenario, rid = r.question
            raise ValueError(f"{path}: model {r.model!r} has two {scenario} review records with id {rid!r}")
        answered.setdefault(r.question, []).append(r.model)
    held = select_heldout(answered, heldout.questions, heldout.models, heldout.seed)
    held_questions = {q for q, _ in held}
    result.models = sorted({r.model for r in reviewed})
    result.questions = len(answered)
    result.heldout = {**as_dict(heldout), "responses": len(held)}
    for r in reviewed:
        is_held = (r.question, r.model) in held
        in_train = not is_held and (heldout.share_questions or r.question not in held_questions)
        if is_held if test else in_train:
            judge = options.reference_judge
            result.examples += [_example(r, metric, sample, test, judge) for metric, sample in r.samples.items()]
    return result


def _read_file(
    path: Path, image_root: Path | None, on_error: OnError, result: ReviewsReadResult, prompts: ReviewPrompts
) -> list[Reviewed]:
    model, scenario = path.parent.name, scenario_of(path)
    seen: dict[str, int | str] = {}
    reviewed = []
    n_records = 0
    for source, raw in iter_records(path):
        n_records += 1
        try:
            if isinstance(raw, DataFormatError):
                raise raw
            record = as_object(raw, source)
            rid, source = record_id(record, "id", source)
            if rid in seen:
                raise source.error("id", f"a unique record id; {rid!r} is also record {seen[rid]}")
            seen[rid] = source.record
            profile = {key: require_str(record, key, source) for key in PROFILE_KEYS}
            image = require_str(record, "image", source)
            turns = require_list(record, "conversations", source)
            if len(turns) != 2:
                raise source.error("conversations", f"two turns (question, answered reply), got {len(turns)}")
            question = require_str(
                as_object(turns[0], source, "conversations[0]"), "value", source, "conversations[0].value"
            )
            reply = as_object(turns[1], source, "conversations[1]")
            answer = require_str(reply, "answer", source, "conversations[1].answer")
            truth = require_str(reply, "value", source, "conversations[1].value")
            reviews = as_object(require(record, REVIEW_KEY, source), source, REVIEW_KEY)
            resolved = str(confined_path(image_root, image, file=path, record=source.record, field="image"))
        except DataFormatError as error:
            result.add_error(error, on_error)
            continue
        system = Turn("system", prompts.system)
        samples = {}
        for metric in METRICS:
            try:
                review, pair = _review(reviews, metric, source)
            except DataFormatError as error:
                result.add_error(error, on_error)
                continue
            text = prompts.review(metric, question=question, answer_a=answer, answer_b=truth, **profile)
            samples[metric] = ((system, Turn("user", text, image=resolved)), review, pair)
        reviewed.append(Reviewed(model, (scenario, rid), samples, image))
    if n_records == 0:
        raise DataFormatError(path, "file", "<document>", "at least one record (found none)")
    return reviewed


def _review(reviews: Mapping[str, Any], metric: str, source) -> tuple[str, tuple[float, float]]:
    """The review text of ``metric`` and its score pair."""
    where = f"{REVIEW_KEY}.{metric}"
    entry = as_object(require(reviews, metric, source, where), source, where)
    text = require_str(entry, "review", source, f"{where}.review")
    score = require(entry, "score", source, f"{where}.score")
    low, high = SCORE_RANGE
    if not (
        isinstance(score, list)
        and len(score) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) and low <= x <= high for x in score)
    ):
        shown = f"{score!r}" if isinstance(score, list | dict) else type_name(score)
        raise source.error(f"{where}.score", f"a score pair [a, b], each from 1 to 10 (got {shown})")
    return text, (float(score[0]), float(score[1]))


def _example(r: Reviewed, metric: str, sample: tuple, test: bool, judge: str) -> SFTExample | EvalExample:
    prompt, review, pair = sample
    scenario, rid = r.question
    sample_id = f"{r.model}/{scenario}/{rid}/{metric}"
    meta = {
        "metric": metric,
        "score": list(pair),
        "reference_judge": judge,
        "model": r.model,
        "question": rid,
        "scenario": scenario,
    }
    if test:
        return EvalExample(sample_id, prompt, review, scenario, {**meta, "image": r.image})
    return SFTExample(sample_id, (*prompt, Turn("assistant", review)), meta)


FORMATS.register("mmrole_reviews")(DataFormat(ReviewsOptions, train=read_train, test=read_test))
