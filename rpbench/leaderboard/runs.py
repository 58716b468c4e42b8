"""A run folder read into its cell: metrics.json, config.yaml, scores.jsonl and Hydra's record (``.hydra/``);
a ``RunFolderError`` naming the file that cannot be read."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rpbench.core.errors import RpbenchError
from rpbench.eval.benchmarks import BENCHMARKS
from rpbench.eval.benchmarks.base import Headline
from rpbench.eval.provenance import NOT_COMPARED
from rpbench.eval.stats import summarize

if TYPE_CHECKING:
    from rpbench.leaderboard.board import Conflict


UNRECORDED = "unrecorded"  # an identity field an earlier rpbench did not write
BOOTSTRAP = {"n_resamples": 1000, "confidence": 0.95, "seed": 0}
# what a cell's runs must share to be combined and ranked together
IDENTITY_FIELDS = ("headline", "judge", "prompts", "decoding", "data")
DIGEST_CHARS = 12  # a prompt set's or decoding's sha256 as a cell's identity shows it


class RunFolderError(RpbenchError):
    """A run folder whose files cannot be read as a run's (the message names the file): the run is skipped
    and listed with why, the rest of the board is still built."""


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; a RunFolderError naming it otherwise."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RunFolderError(f"{path}: not JSON ({error.msg} at char {error.pos})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunFolderError(f"{path}: cannot be read ({type(error).__name__}: {error})") from None
    if not isinstance(value, dict):
        raise RunFolderError(f"{path}: a JSON object expected, got {type(value).__name__}")
    return value


def read_config(path: Path) -> dict[str, Any]:
    """The run's config.yaml (empty when the run has none); a RunFolderError naming it when unreadable."""
    if not path.exists():
        return {}
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise RunFolderError(f"{path}: cannot be read as YAML ({type(error).__name__}: {error})") from None
    if value is not None and not isinstance(value, dict):
        raise RunFolderError(f"{path}: a mapping expected, got {type(value).__name__}")
    return value or {}


@dataclass(frozen=True)
class Identity:
    """What a cell's number depends on besides the model: never averaged or ranked across."""

    headline: str
    judge: str
    prompts: str  # sha256 (12 characters) over the prompts' sha256 metrics.json records; unrecorded
    decoding: str  # sha256 (12 characters) of the evaluated model's decoding settings; unrecorded
    data: str
    version: str

    def comparable(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in IDENTITY_FIELDS)


@dataclass(frozen=True)
class Provenance:
    """What produced a cell besides the model, spelled out for the leaderboard's footnotes: the judge, each
    prompt's sha256 (``name sha256[:12]``) and the decoding settings (``key=value``)."""

    judge: str
    prompts: str
    decoding: str


def short_sha(digest: str, length: int) -> str:
    """The first ``length`` characters of a sha256 (``unrecorded`` whole)."""
    return digest if digest == UNRECORDED else digest[:length]


@dataclass
class Cell:
    """One run's headline on one benchmark."""

    row: str
    benchmark: str
    run: str
    identity: Identity
    value: float | None
    ci_low: float | None
    ci_high: float | None
    higher_is_better: bool
    units: dict[str, float | None] = field(default_factory=dict)  # scores.jsonl unit -> score
    provenance: Provenance | None = None  # the judge, prompts and decoding in full (footnotes)
    judge_cost: dict[str, float] = field(default_factory=dict)  # requests, tokens, cost_usd: summed over its runs
    seeds: int = 1
    short: str | None = None  # why the run is a short one (debug=short, ...); None: a full run
    conflict: Conflict | None = None  # the cell's runs differ in identity
    flag: str | None = None  # not ranked: the cell differs from its column's identity, or is a short run
    other_version: bool = False  # written by another rpbench version than most of its column (ranked, shown)


def find_runs(folders: Iterable[Path]) -> list[Path]:
    """Each folder holding a metrics.json, at or below ``folders``, in path order."""
    runs: set[Path] = set()
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such folder")
        runs.update(p.parent for p in folder.rglob("metrics.json"))
    return sorted(runs)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RunFolderError(f"{where}: a mapping expected, got {value!r}")
    return value


def short_run(run: Path, results: Mapping[str, Any], config: Mapping[str, Any]) -> str | None:
    """Why ``run`` is a short one, its numbers a check that the pipeline works rather than a result: its
    metrics.json's ``short_run``; for a run written before metrics.json recorded it, the ``debug`` preset Hydra
    recorded choosing (``.hydra/hydra.yaml``), or ``trainer.fast_dev_run`` in its config.yaml; None for a full
    run."""
    if "short_run" in results:
        why = results["short_run"]
        if why is not None and not isinstance(why, str):
            raise RunFolderError(f"{run / 'metrics.json'}: short_run: why the run is short or null, got {why!r}")
        return why
    hydra_file = run / ".hydra" / "hydra.yaml"
    preset = find(read_config(hydra_file), ["hydra", "runtime", "choices", "debug"])
    if preset is not None:
        return f"debug={preset}"
    fast = find(config, ["trainer", "fast_dev_run"])
    return f"trainer.fast_dev_run={fast}" if fast else None


def row_name(by: str, run: Path, results: Mapping[str, Any], config: Mapping[str, Any], data: str) -> str:
    """The run's row under ``--by`` ``by`` (one of ``ROWS``): a re-judged run's is its source run's policy (the
    model whose sessions it judged, ``eval.rejudged.source``)."""
    source = find(results, ["eval", "rejudged", "source"])
    policy = source if isinstance(source, Mapping) else results
    model, objective = str(policy.get("model")), policy.get("objective", "none")
    trained = model if objective == "none" else f"{model} + {objective}"
    if by == "data":
        return f"{trained} · data {results.get('data', UNRECORDED)} (test {short_sha(data, 8)})"
    if by == "seed":
        return f"{trained} · seed {config.get('seed', UNRECORDED)}"
    return str(run) if by == "run" else trained


def reward_model_identity(config: Mapping[str, Any], where: str) -> str | None:
    """``reward_model:<folder name>`` when a reward model scores the run (``evaluator.reward_model.path``, and
    ``evaluator.scorer`` when there is one says so: CharacterEval's CharacterRM, RM-Bench's); its folder's name
    only, never the machine's path."""
    evaluator = _mapping(config.get("evaluator"), f"{where}: evaluator")
    path = _mapping(evaluator.get("reward_model"), f"{where}: evaluator.reward_model").get("path")
    if not path or evaluator.get("scorer", "reward_model") != "reward_model":
        return None
    return f"reward_model:{Path(str(path)).name}"


def judge_identity(config: Mapping[str, Any], where: str = "config.yaml") -> str:
    """``backend:model`` of the run's judge (``at <base_url>`` where recorded; a served model's ``@revision``;
    each judge of an ``evaluator.judges`` ensemble), and the reward model that scores it; ``none``."""
    judge = _mapping(config.get("judge"), f"{where}: judge")
    backend = judge.get("backend", UNRECORDED)
    scorer = reward_model_identity(config, where)
    if backend == "none":
        return scorer or "none"
    if backend == "local":
        served = _mapping(judge.get("server"), f"{where}: judge.server").get("model")
        model = served.get("name") if isinstance(served, Mapping) else served
        revision = served.get("revision") if isinstance(served, Mapping) else None
        snapshot = f"{model}@{revision}" if revision else model
        names = [f"{backend}:{snapshot}"]
    else:
        model = judge.get("model")
        at = judge.get("base_url")
        names = [f"{backend}:{model}" + (f" at {at}" if at else "")]
    extras = _mapping(config.get("evaluator"), f"{where}: evaluator").get("judges") or []
    if not isinstance(extras, list):
        raise RunFolderError(f"{where}: evaluator.judges: a list of judges expected, got {extras!r}")
    for k, extra in enumerate(extras):
        extra = _mapping(extra, f"{where}: evaluator.judges[{k}]")
        at = extra.get("base_url")
        names.append(f"{extra.get('backend', backend)}:{extra.get('model', model)}" + (f" at {at}" if at else ""))
    return "+".join([*names, *([scorer] if scorer else [])])


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def prompt_digests(results: Mapping[str, Any], where: str) -> dict[str, str]:
    """Each prompt's sha256 as metrics.json records it, ``eval.prompts`` (name -> {origin, sha256}, or name ->
    sha256, nested by language or aspect), keyed by its dotted name. (A session judge's ``prompt_sha256`` is
    part of its judge: ``recorded_judges``.)"""
    found: dict[str, str] = {}

    def walk(node: Any, name: str) -> None:
        if isinstance(node, str):
            found[name] = node
        elif isinstance(node, Mapping) and isinstance(node.get("sha256"), str):
            found[name] = node["sha256"]
        elif isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{name}.{key}" if name else str(key))
        else:
            raise RunFolderError(f"{where}: eval.prompts.{name}: a sha256 or a mapping holding one, got {node!r}")

    walk(_mapping(results["eval"].get("prompts"), f"{where}: eval.prompts"), "")
    return found


def decoding_settings(config: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The evaluated model's decoding settings (``evaluator.generation`` less how generation runs, as the
    predictions' fingerprint compares them); None when config.yaml records none."""
    generation = find(config, ["evaluator", "generation"])
    if generation is None:
        return None
    generation = _mapping(generation, f"{where}: evaluator.generation")
    return {k: v for k, v in sorted(generation.items()) if k not in NOT_COMPARED}


def provenance(results: Mapping[str, Any], config: Mapping[str, Any], judge: str, where: tuple[str, str]):
    """(prompts digest, decoding digest, Provenance) of a run; ``where``: its metrics.json and config.yaml."""
    prompts = prompt_digests(results, where[0])
    decoding = decoding_settings(config, where[1])
    prompt_text = "; ".join(f"{name} {sha[:DIGEST_CHARS]}" for name, sha in sorted(prompts.items()))
    decoding_text = UNRECORDED if decoding is None else ", ".join(f"{k}={v}" for k, v in decoding.items())
    prompt_id = digest(json.dumps(sorted(prompts.items()))) if prompts else UNRECORDED
    decoding_id = UNRECORDED if decoding is None else digest(json.dumps(decoding, sort_keys=True, default=str))
    return prompt_id, decoding_id, Provenance(judge, prompt_text or UNRECORDED, decoding_text)


def recorded_judges(results: Mapping[str, Any], where: str) -> str | None:
    """The judges a run recorded itself (``eval.session_judges``: backend, model, endpoint and prompt sha256 of
    each), as ``backend:model at endpoint, prompt <sha256[:12]>`` joined by ``+``; None when it recorded none (the
    judge is then read from config.yaml). Another endpoint or prompt is another judge: never ranked together."""
    judges = find(results, ["eval", "session_judges"])
    if judges is None:
        return None
    if not isinstance(judges, list) or not judges:
        raise RunFolderError(f"{where}: eval.session_judges: a list of judges expected, got {judges!r}")
    names = []
    for k, judge in enumerate(judges):
        fields = ("backend", "model", "endpoint", "prompt_sha256")
        if not isinstance(judge, Mapping) or not all(isinstance(judge.get(f), str) for f in fields):
            raise RunFolderError(f"{where}: eval.session_judges[{k}]: {', '.join(fields)} expected, got {judge!r}")
        prompt = judge["prompt_sha256"][:12]
        names.append(f"{judge['backend']}:{judge['model']} at {judge['endpoint']}, prompt {prompt}")
    return "+".join(names)


def find(tree: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def headline_of(
    headlines: Sequence[Headline], evaluation: Mapping[str, Any], where: str = "metrics.json"
) -> tuple[Headline, Any] | None:
    """The first declared headline the results hold, with the mapping (or number) it names; a RunFolderError
    when that number is not finite (NaN is never shown or ranked)."""
    for headline in headlines:
        found = find(evaluation, headline.path)
        value = found if not headline.value else find(found, [headline.value])
        if _is_number(value):
            if not math.isfinite(value):
                key = ".".join(("eval", *headline.path, *([headline.value] if headline.value else [])))
                raise RunFolderError(f"{where}: {key} (the {headline.label} headline) is {value}: not ranked")
            return headline, found
    return None


def score_units(run: Path, how: str) -> dict[str, float | None]:
    """The run's per-record scores as ``how`` reads them (``Headline.scores``), keyed by record (and verdict);
    a RunFolderError naming the file and line of a row that does not hold them."""
    path = run / "scores.jsonl"
    if not how or not path.exists():
        return {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise RunFolderError(f"{path}: cannot be read ({type(error).__name__}: {error})") from None
    units: dict[str, float | None] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunFolderError(f"{where}: not JSON ({error.msg})") from None
        if not isinstance(row, dict) or "id" not in row:
            raise RunFolderError(f"{where}: a JSON object with an id expected")
        where += f" (record {row['id']!r})"
        if how == "verdicts":
            for rubric, verdict in _mapping(row.get("verdicts"), f"{where}: verdicts").items():
                for i, v in enumerate(verdict if isinstance(verdict, list) else [verdict]):
                    units[f"{row['id']}|{rubric}|{i}"] = _unit(v, f"{where}: verdicts.{rubric}")
        else:
            kind, name = how.split("/", 1)
            scores = _mapping(row.get(kind), f"{where}: {kind}")
            if name not in scores:
                raise RunFolderError(f"{where}: no {kind}.{name}")
            units[str(row["id"])] = _unit(scores[name], f"{where}: {kind}.{name}")
    return units


def _unit(value: Any, where: str) -> float | None:
    """A record's score: a finite number, or None (not scored)."""
    if value is None:
        return None
    if not _is_number(value) or not math.isfinite(value):
        raise RunFolderError(f"{where}: a finite number or null expected, got {value!r}")
    return float(value)


def _bound(entry: Any, key: str, where: str) -> float | None:
    value = entry.get(key) if isinstance(entry, Mapping) else None
    if value is not None and (not _is_number(value) or not math.isfinite(value)):
        raise RunFolderError(f"{where}: {key}={value!r}: a finite number or null expected")
    return value


def judge_cost(results: Mapping[str, Any], where: str) -> dict[str, float]:
    """requests, tokens and cost_usd of ``eval.judge_cost`` (empty when the run recorded none)."""
    cost = _mapping(results["eval"].get("judge_cost"), f"{where}: eval.judge_cost")
    if "requests" not in cost:
        return {}
    needed = ("requests", "prompt_tokens", "completion_tokens", "cost_usd")
    bad = [k for k in needed if not _is_number(cost.get(k)) or not math.isfinite(cost[k])]
    if bad:
        raise RunFolderError(f"{where}: eval.judge_cost has no number for {', '.join(bad)}")
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    return {"requests": cost["requests"], "tokens": tokens, "cost_usd": cost["cost_usd"]}


def read_cell(run: Path, by: str) -> tuple[Cell | None, str | None]:
    """The run's cell in its row under ``--by`` ``by``, or None and why it has none; a RunFolderError naming the
    file that cannot be read."""
    run = Path(os.path.relpath(run))  # as the user named it, relative: no machine path in the leaderboard
    metrics = run / "metrics.json"
    results = read_json(metrics)
    benchmark = results.get("evaluator", "none")
    if not isinstance(benchmark, str):
        raise RunFolderError(f"{metrics}: evaluator: a benchmark name expected, got {benchmark!r}")
    if benchmark == "none" or "eval" not in results:
        return None, "no evaluation"
    if not isinstance(results["eval"], Mapping):
        raise RunFolderError(f"{metrics}: eval: a mapping of results expected, got {type(results['eval']).__name__}")
    if results.get("failed"):  # its results rest on nothing (rpbench.pipeline.RunFailed): never ranked
        return None, f"failed: {results['failed']}"
    if benchmark not in BENCHMARKS.names():
        return None, f"evaluator {benchmark!r} is not registered here (a plugin's?)"
    found = headline_of(BENCHMARKS.get(benchmark).headlines, results["eval"], str(metrics))
    if found is None:
        return None, f"no headline of {benchmark} in its results"
    headline, entry = found
    config_path = run / "config.yaml"
    config = read_config(config_path)
    judge = recorded_judges(results, str(metrics)) or judge_identity(config, str(config_path))
    prompts, decoding, produced = provenance(results, config, judge, (str(metrics), str(config_path)))
    data = str(find(results, ["records", "test", "records_sha256"]) or UNRECORDED)
    version = str(results.get("rpbench_version", UNRECORDED))
    identity = Identity(headline.label, judge, prompts, decoding, data, version)
    value = float(entry) if not headline.value else float(entry[headline.value])
    units = score_units(run, headline.scores)
    low, high = _bound(entry, "ci_low", str(metrics)), _bound(entry, "ci_high", str(metrics))
    if low is None and units:
        summary = summarize(list(units.values()), **BOOTSTRAP)
        low, high = summary["ci_low"], summary["ci_high"]
    row = row_name(by, run, results, config, data)
    cell = Cell(row, benchmark, str(run), identity, value, low, high, headline.higher_is_better, units)
    cell.judge_cost = judge_cost(results, str(metrics))
    cell.provenance = produced
    cell.short = short_run(run, results, config)
    return cell, None
