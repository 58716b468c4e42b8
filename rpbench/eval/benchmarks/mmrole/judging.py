"""MMRole-Eval: judge answers metric by metric against the ground truth, and aggregate reviews.

Layout (as in the MMRole repository): an answers folder holds ``<scenario>_test.json`` files (records with
``conversations[1]["answer"]``); a reviews folder holds the same records plus ``rm_review``: per metric
``{"review": str, "score": [a, b]}`` (A = evaluated answer, B = ground truth); a results folder holds one
CSV per file: ``count`` and the mean of a/b per metric. An empty ``score`` (the official scripts write ``{}``
when the score cannot be read) is a parse failure: counted per metric and left out of the mean, never 0.
With ``swap=True`` every metric is also asked with the two responses exchanged (``rm_review_swapped``,
scores in presentation order) to measure position bias.

Test sets (MMRole's In-Test and Out-Test): one folder per set; ``aggregate_review_sets`` and
``judge_answer_sets`` give each set's results under ``test_sets[<name>]`` and ``all`` pooled over every
record of every set (the paper's Table 5 "average results across all test samples").
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.files import confined_path
from rpbench.data.mmrole.prompts import DEFAULT_PROMPTS, METRICS, REASK, ReviewPrompts
from rpbench.scoring.chat.client import ChatClient, ChatRequest, ParsedReply, image_part
from rpbench.scoring.judge.parse import parse_score_pair

REVIEW_KEY = "rm_review"
SWAPPED_KEY = "rm_review_swapped"
ANSWER_FIELDS = ("id", "image", "role", "script", "other_role")


# ---------------------------------------------------------------- aggregation


def aggregate_reviews(reviews_dir: str | Path, also_into: _Tally | None = None) -> dict[str, Any]:
    """Per review file (``files[<stem>]``) and pooled over all files (``all``): ``count`` (records with a
    review), ``unreviewed``, per-metric ``means``, ``n``, ``parse_failures``, ``request_failures``, and
    ``overall`` (mean of the metric means); with swapped reviews also ``position_bias``. Every record is
    also added to ``also_into`` when given (pooling over several folders)."""
    paths = sorted(Path(reviews_dir).glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"{reviews_dir}: no review files (*.json)")
    files, pooled = {}, _Tally()
    for path in paths:
        tally = _Tally()
        for index, record in enumerate(_read_list(path)):
            for target in (tally, pooled, also_into):
                if target is not None:
                    target.add(path, index, record)
        files[path.stem] = tally.summary()
    return {"metrics": list(METRICS), "files": files, "all": pooled.summary()}


def aggregate_review_sets(folders: Mapping[str, str | Path]) -> dict[str, Any]:
    """``aggregate_reviews`` of each test set's folder (``test_sets[<name>]``), and ``all``: pooled over
    every record of every set."""
    pooled = _Tally()
    sets = {str(name): aggregate_reviews(folder, pooled) for name, folder in folders.items()}
    return {"metrics": list(METRICS), "test_sets": sets, "all": pooled.summary()}


def write_results_csvs(results: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """One ``<stem>.csv`` per review file in the official format: header ``count`` + the eight metrics,
    then one row of values (a metric with no parsed score is left empty). Test sets: one folder each."""
    out = Path(out_dir)
    if "test_sets" in results:
        return [path for name, part in results["test_sets"].items() for path in write_results_csvs(part, out / name)]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, summary in results["files"].items():
        path = out / f"{stem}.csv"
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["count", *METRICS])
            writer.writerow(
                [summary["count"], *("" if summary["means"][m] is None else summary["means"][m] for m in METRICS)]
            )
        written.append(path)
    return written


class _MetricSums:
    """Per-metric running sums of ratios in record order (the official order, so floats match exactly)."""

    def __init__(self) -> None:
        self.sums = {m: 0.0 for m in METRICS}
        self.n = {m: 0 for m in METRICS}
        self.failures = {kind: {m: 0 for m in METRICS} for kind in ("parse", "request")}

    def add(self, metric: str, ratio: float | None, failure: str | None) -> None:
        if ratio is not None:
            self.sums[metric] += ratio
            self.n[metric] += 1
        elif failure is not None:
            self.failures[failure][metric] += 1

    def summary(self) -> dict[str, Any]:
        means = {m: self.sums[m] / self.n[m] if self.n[m] else None for m in METRICS}
        values = [v for v in means.values() if v is not None]
        return {
            "means": means,
            "n": dict(self.n),
            "parse_failures": dict(self.failures["parse"]),
            "request_failures": dict(self.failures["request"]),
            "overall": sum(values) / len(values) if values else None,
        }


class _Tally:
    """One file's (or all files') reviews: original order, swapped order, and their paired difference."""

    def __init__(self) -> None:
        self.count = self.unreviewed = 0
        self.original, self.swapped, self.bias = _MetricSums(), _MetricSums(), _MetricSums()
        self.has_swapped = False

    def add(self, path: Path, index: int, record: Any) -> None:
        if not isinstance(record, Mapping):
            raise DataFormatError(path, index, "(record)", f"a JSON object, got {type(record).__name__}")
        rid = record.get("id", index)
        review, swapped = record.get(REVIEW_KEY), record.get(SWAPPED_KEY)
        if not review:
            self.unreviewed += 1
            return
        self.count += 1
        for metric in METRICS:
            ratio, failure = _ratio(path, rid, REVIEW_KEY, review, metric)
            self.original.add(metric, ratio, failure)
            if swapped:
                self.has_swapped = True
                swapped_ratio, swapped_failure = _ratio(path, rid, SWAPPED_KEY, swapped, metric)
                self.swapped.add(metric, swapped_ratio, swapped_failure)
                if ratio is not None and swapped_ratio is not None:
                    self.bias.add(metric, ratio - swapped_ratio, None)

    def summary(self) -> dict[str, Any]:
        summary = {"count": self.count, "unreviewed": self.unreviewed, **self.original.summary()}
        if self.has_swapped:
            summary["swapped"] = self.swapped.summary()
            summary["position_bias"] = self.bias.summary()["means"]
        return summary


def review_ratios(reviews_dir: str | Path) -> dict[tuple[str, str], tuple[float, float | None]]:
    """(record id, metric) -> (a/b, the swapped review's a/b or None) of every scored review in the folder."""
    out = {}
    for path in sorted(Path(reviews_dir).glob("*.json")):
        for index, record in enumerate(_read_list(path)):
            rid = record.get("id", index) if isinstance(record, Mapping) else index
            review, swapped = (
                (record.get(REVIEW_KEY), record.get(SWAPPED_KEY)) if isinstance(record, Mapping) else (None, None)
            )
            for metric in METRICS if review else ():
                ratio, _ = _ratio(path, rid, REVIEW_KEY, review, metric)
                other = _ratio(path, rid, SWAPPED_KEY, swapped, metric)[0] if swapped else None
                if ratio is not None:
                    out[str(rid), metric] = (ratio, other)
    return out


def _ratio(path: Path, rid: Any, key: str, review: Any, metric: str) -> tuple[float | None, str | None]:
    """The evaluated answer's score over the ground truth's for one metric (a/b; b/a in a swapped review,
    where the ground truth came first), or (None, "parse" | "request") when the review has no score."""
    if not isinstance(review, Mapping):
        raise DataFormatError(path, rid, key, f"an object of per-metric reviews, got {type(review).__name__}")
    entry = review.get(metric)
    field = f"{key}.{metric}"
    if not isinstance(entry, Mapping) or "score" not in entry:
        raise DataFormatError(path, rid, field, "an object with 'review' and 'score'")
    score = entry["score"]
    if score in ({}, [], None):
        return None, "request" if entry.get("error") else "parse"
    if (
        not isinstance(score, list)
        or len(score) != 2
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in score)
    ):
        raise DataFormatError(
            path, rid, f"{field}.score", f"a pair of numbers [a, b] (or {{}} if unparsed), got {score!r}"
        )
    answer, reference = (score[1], score[0]) if key == SWAPPED_KEY else (score[0], score[1])
    if reference <= 0:
        raise DataFormatError(path, rid, f"{field}.score", f"a positive ground-truth score, got {score!r}")
    return answer / reference, None


# ---------------------------------------------------------------- judging


def judge_answers(
    answers_dir: str | Path,
    client: ChatClient,
    reviews_dir: str | Path,
    max_tokens: int,
    *,
    prompts: ReviewPrompts = DEFAULT_PROMPTS,
    image_root: str | Path | None = None,
    swap: bool = False,
) -> dict[str, Any]:
    """Judge every answers file of ``answers_dir`` into ``reviews_dir`` (official layout) and aggregate,
    asking with ``prompts`` (rpbench's or the authors', ``rpbench.data.mmrole.prompts.review_prompts``) for reviews
    of at most ``max_tokens`` tokens (``evaluator.judge_max_tokens``).

    One judge call per metric per record (two with ``swap``); the image is attached as a data URL when
    the judge is multimodal and ``image_root / record["image"]`` exists. An image path that leaves
    ``image_root`` (``confined_path``) is a DataFormatError before the file's first judge call. Unreadable
    scores are re-asked (``parse_tries``) and then stored as ``score: {}`` (parse failure). Returns
    ``aggregate_reviews`` plus ``images`` (attached / missing) and ``judge_stats``.
    """
    paths = sorted(Path(answers_dir).glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"{answers_dir}: no answer files (*.json)")
    out = Path(reviews_dir)
    out.mkdir(parents=True, exist_ok=True)
    images = {"attached": 0, "missing": 0}
    for path in paths:
        records = [_validated_answer(path, i, r) for i, r in enumerate(_read_list(path))]
        orders = [False, True] if swap else [False]
        parts = [_image_part(path, record, client, image_root, images) for record in records]
        jobs = [(i, metric, flipped) for i in range(len(records)) for metric in METRICS for flipped in orders]
        requests = [
            _request(records[i], metric, flipped, parts[i], client, prompts, max_tokens) for i, metric, flipped in jobs
        ]
        replies = client.ask_parsed(requests, parse_score_pair, REASK, desc=f"MMRole-Eval {path.stem}")
        for (i, metric, flipped), reply in zip(jobs, replies):
            records[i].setdefault(SWAPPED_KEY if flipped else REVIEW_KEY, {})[metric] = _review_entry(reply)
        with open(out / path.name, "w", encoding="utf-8") as handle:
            json.dump(records, handle, ensure_ascii=False, indent=4)
    results = aggregate_reviews(out)
    results["images"] = images
    results["judge_stats"] = client.stats.as_dict()
    return results


def judge_answer_sets(
    folders: Mapping[str, str | Path], client: ChatClient, reviews_dir: str | Path, max_tokens: int, **options: Any
) -> dict[str, Any]:
    """``judge_answers`` of each test set's answers folder into ``reviews_dir/<name>``; the results as
    ``aggregate_review_sets`` gives them, plus ``images`` (summed) and ``judge_stats``."""
    images = {"attached": 0, "missing": 0}
    for name, folder in folders.items():
        judged = judge_answers(folder, client, Path(reviews_dir) / str(name), max_tokens, **options)
        images = {key: images[key] + judged["images"][key] for key in images}
    results = aggregate_review_sets({name: Path(reviews_dir) / str(name) for name in folders})
    results["images"] = images
    results["judge_stats"] = client.stats.as_dict()
    return results


def _request(
    record: Mapping[str, Any],
    metric: str,
    flipped: bool,
    image: dict | None,
    client: ChatClient,
    prompts: ReviewPrompts,
    max_tokens: int,
) -> ChatRequest:
    turn = record["conversations"][1]
    answer, truth = turn["answer"], turn["value"]
    text = prompts.review(
        metric,
        question=record["conversations"][0]["value"],
        answer_a=truth if flipped else answer,
        answer_b=answer if flipped else truth,
        role=record["role"],
        script=record["script"],
        other_role=record["other_role"],
    )
    content: Any = [image, {"type": "text", "text": text}] if image else text
    messages = ({"role": "system", "content": prompts.system}, {"role": "user", "content": content})
    return ChatRequest(messages, max_tokens, prompts.version)


def _review_entry(reply: ParsedReply) -> dict[str, Any]:
    entry: dict[str, Any] = {"review": reply.text or "", "score": list(reply.value) if reply.value else {}}
    if reply.error is not None:
        entry["error"] = reply.error
    return entry


def _image_part(
    answers: Path, record: Mapping[str, Any], client: ChatClient, image_root: str | Path | None, counts: dict[str, int]
) -> dict | None:
    path = confined_path(image_root, record["image"], file=answers, record=record["id"], field="image")
    if not client.config.multimodal:
        return None
    if image_root is None or not path.is_file():
        counts["missing"] += 1
        return None
    counts["attached"] += 1
    return image_part(path)


def _validated_answer(path: Path, index: int, record: Any) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise DataFormatError(path, index, "(record)", f"a JSON object, got {type(record).__name__}")
    rid = record.get("id", index)
    for field in ANSWER_FIELDS:
        if not isinstance(record.get(field), str):
            raise DataFormatError(path, rid, field, "a string")
    turns = record.get("conversations")
    if not isinstance(turns, list) or len(turns) != 2:
        raise DataFormatError(path, rid, "conversations", "a list of two turns (user prompt, assistant reply)")
    for i, keys in enumerate((("value",), ("value", "answer"))):
        for key in keys:
            if not isinstance(turns[i], dict) or not isinstance(turns[i].get(key), str):
                raise DataFormatError(path, rid, f"conversations[{i}].{key}", "a string")
    return record


def _read_list(path: Path) -> Sequence[Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as error:
        raise DataFormatError(path, f"line {error.lineno}", "(file)", f"valid JSON ({error.msg})") from None
    if not isinstance(data, list):
        raise DataFormatError(path, "(top level)", "(file)", f"a JSON list of records, got {type(data).__name__}")
    return data
