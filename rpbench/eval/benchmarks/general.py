"""General ability through lm-evaluation-harness (RoleMRC Table 7 and Table 5's "General Δ").

Each task of ``evaluator.tasks`` (an lm-eval task or group name, its shots, and the metric reported as
``<metric>,<filter>``) runs through ``lm_eval.simple_evaluate`` on the run's loaded model (lm-eval's HFLM
wraps it) or, with ``evaluator.backend=endpoint``, on an OpenAI-compatible completions server
(lm-eval's ``local-completions``). ``evaluator.include_path`` adds a folder of your own task YAMLs
(lm-eval's custom-task mechanism).

Per task, the run folder gets ``general/<task>.json`` (lm-eval's results and per-document scores; a rerun
skips the tasks already there), and scores.jsonl a row per document (``<subtask>/<doc_id>``). The task's
score is the mean of its per-document values (lm-eval's "mean" aggregation; a group's documents pooled,
which is lm-eval's size-weighted group mean), with a bootstrap CI; lm-eval's own aggregate is reported
next to it. ``evaluator.compare_to=<run>`` gives ``general_delta``: per task this run minus that run in
points (0-100), their mean (the paper's General Δ), and a paired bootstrap on the shared documents.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, read_jsonl, write_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.provenance import claim
from rpbench.eval.settings import Bootstrap, Endpoint
from rpbench.eval.stats import paired_bootstrap, summarize

log = logging.getLogger(__name__)

RESULTS_DIR = "general"
TASK_KEYS = ("name", "num_fewshot", "metric", "label")


@dataclass(frozen=True, kw_only=True)
class HarnessEndpoint(Endpoint):
    tokenizer: str | None  # the Hugging Face tokenizer of the served model (None: the endpoint's model name)


@dataclass(frozen=True, kw_only=True)
class GeneralSettings(Settings):
    """``evaluator=general``: lm-eval tasks on the run's model (local) or a served one (endpoint)."""

    name: str
    backend: str
    endpoint: HarnessEndpoint
    tasks: tuple[Any, ...]
    include_path: str | None
    include_defaults: bool
    batch_size: int
    max_length: int | None
    limit: float | None
    apply_chat_template: bool
    seed: int
    metrics: tuple[str, ...]
    bootstrap: Bootstrap
    compare_to: str | None
    radar_metric: str | None

    def problems(self):
        found = []
        if not self.tasks:
            found.append(("tasks", "at least one lm-eval task"))
        for i, task in enumerate(self.tasks):
            missing = [k for k in TASK_KEYS if not isinstance(task, Mapping) or k not in task]
            if missing:
                found.append((f"tasks[{i}]", f"a mapping with {', '.join(TASK_KEYS)} (missing {', '.join(missing)})"))
            elif "," not in str(task["metric"]):
                found.append((f"tasks[{i}].metric", "'<metric>,<filter>' (e.g. acc,none)"))
        if self.backend not in ("local", "endpoint"):
            found.append(("backend", "local or endpoint (evaluator=general)"))
        if self.backend == "endpoint" and not (self.endpoint.base_url and self.endpoint.model):
            found.append(("endpoint", "base_url and model set with backend=endpoint"))
        if self.batch_size < 1:
            found.append(("batch_size", "an integer >= 1"))
        if self.limit is not None and self.limit <= 0:
            found.append(("limit", "null (all documents), a count >= 1 or a share in (0, 1)"))
        if self.max_length is not None and self.max_length < 1:
            found.append(("max_length", "null or an integer >= 1"))
        return found


def task_fingerprint(ctx: EvalContext, task: Mapping[str, Any]) -> dict[str, Any]:
    """What a task's results file is resumed under (``rpbench.eval.provenance``): the model's identity (or the
    endpoint's), the task and the settings that change its scores."""
    ev = ctx.settings
    if ev.backend == "endpoint":
        model = {f"endpoint.{k}": getattr(ev.endpoint, k) for k in ("base_url", "model", "tokenizer")}
    else:
        model = dict(ctx.model_identity)
    shaping = ("include_path", "include_defaults", "max_length", "limit", "apply_chat_template", "seed")
    return {**model, "backend": ev.backend, "task": dict(task), **{k: getattr(ev, k) for k in shaping}}


class General(Benchmark):
    headlines = (Headline("mean accuracy (%)", ("general_mean",), ""),)
    reads_records = False
    settings_class = GeneralSettings

    def evaluate_model(self, ctx: EvalContext) -> dict[str, Any]:
        ev, out_dir, logger = ctx.settings, ctx.out_dir, ctx.logger
        tasks = [dict(t) for t in ev.tasks]
        folder = out_dir / RESULTS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        lm = manager = None
        resumed = []
        set_aside = {}
        for task in tasks:
            path = folder / f"{task['name']}.json"
            moved = claim(path, task_fingerprint(ctx, task))  # another model's or settings' results: moved aside
            if moved is not None:
                set_aside[task["name"]] = moved
            if path.is_file():
                resumed.append(task["name"])
                continue
            lm = lm or harness_model(ev, ctx.model, ctx.tokenizer)
            manager = manager or task_manager(ev)
            path.write_text(json.dumps(run_task(ev, lm, manager, task), ensure_ascii=False, indent=1))
        bootstrap = ev.bootstrap.as_kwargs()
        per_task, scores = {}, []
        for task in tasks:
            done = json.loads((folder / f"{task['name']}.json").read_text())
            per_task[task["name"]], rows = task_summary(task, done, bootstrap)
            scores += rows
        write_jsonl(out_dir / "scores.jsonl", scores)
        results: dict[str, Any] = {
            "general": per_task,
            "lm_eval_version": lm_eval_version(),
            "resumed_tasks": resumed,
            **({"set_aside": set_aside} if set_aside else {}),
            "metrics": {"overall": {name: t["summary"] for name, t in per_task.items()}},
        }
        results["general_mean"] = _mean([100 * t["summary"]["mean"] for t in per_task.values()])
        if ev.compare_to:
            results["general_delta"] = general_delta(Path(ev.compare_to), per_task, scores, bootstrap)
        results["report_sections"] = report_sections(results)
        if logger is not None:
            if hasattr(logger, "log_table"):
                rows = [[r["id"], r["task"], json.dumps(r["metrics"])] for r in scores]
                logger.log_table(key="eval/general_documents", columns=["id", "task", "metrics"], data=rows)
            logger.log_metrics(
                {
                    f"eval/general/{n}": t["summary"]["mean"]
                    for n, t in per_task.items()
                    if t["summary"]["mean"] is not None
                }
            )
        return results


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm-eval")


def harness_model(ev: GeneralSettings, model: Any, tokenizer: Any):
    """lm-eval's model: HFLM over the loaded model, or local-completions against the configured endpoint."""
    if str(ev.backend) == "endpoint":
        from lm_eval.api.registry import get_model

        endpoint = ev.endpoint
        if not endpoint.base_url or not endpoint.model:
            raise ConfigError("evaluator.backend=endpoint needs evaluator.endpoint.base_url and .model")
        args = {
            "model": str(endpoint.model),
            "base_url": str(endpoint.base_url).rstrip("/") + "/completions",
            "num_concurrent": int(endpoint.concurrency),
            "timeout": int(endpoint.timeout_s),
            "tokenized_requests": False,
            "tokenizer_backend": "huggingface",
            "tokenizer": str(endpoint.tokenizer or endpoint.model),
            "auth_token": os.environ.get(str(endpoint.api_key_env)) if endpoint.api_key_env else None,
        }
        return get_model("local-completions")(**args)
    if model is None:
        raise ConfigError("evaluator=general with backend=local needs a model")
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=int(ev.batch_size), max_length=ev.max_length)


def task_manager(ev: GeneralSettings):
    """lm-eval's task index: its own tasks (``evaluator.include_defaults``) and ``evaluator.include_path``'s."""
    from lm_eval.tasks import TaskManager

    include = str(ev.include_path) if ev.include_path else None
    return TaskManager(include_path=include, include_defaults=bool(ev.include_defaults))


def run_task(ev: GeneralSettings, lm: Any, manager: Any, task: Mapping[str, Any]) -> dict[str, Any]:
    """lm-eval's results for one task at its shots, and its per-document metric values."""
    from lm_eval import simple_evaluate

    if task["name"] not in manager.all_tasks:
        raise ConfigError(
            f"evaluator.tasks: lm-eval knows no task {task['name']!r} (include_path={ev.include_path}, "
            f"include_defaults={ev.include_defaults})"
        )
    out = simple_evaluate(
        model=lm,
        tasks=[str(task["name"])],
        num_fewshot=int(task["num_fewshot"]),
        limit=ev.limit,
        task_manager=manager,
        log_samples=True,
        apply_chat_template=bool(ev.apply_chat_template),
        fewshot_as_multiturn=bool(ev.apply_chat_template),
        bootstrap_iters=0,
        random_seed=int(ev.seed),
        numpy_random_seed=int(ev.seed),
        torch_random_seed=int(ev.seed),
        fewshot_random_seed=int(ev.seed),
    )
    metric, filter_name = str(task["metric"]).split(",", 1)
    documents = []
    for subtask, samples in out["samples"].items():
        for sample in samples:
            if sample.get("filter") != filter_name or metric not in sample:
                continue
            documents.append(
                {
                    "id": f"{subtask}/{sample['doc_id']}",
                    "subtask": subtask,
                    "value": sample[metric],
                    "prediction": _plain(sample.get("filtered_resps")),
                }
            )
    if not documents:
        raise ConfigError(
            f"evaluator.tasks: task {task['name']!r} has no per-document {metric!r} under filter {filter_name!r} "
            f"(its metrics: {sorted(_metric_keys(out['results']))})"
        )
    return {
        "task": dict(task),
        "lm_eval": {name: _plain(values) for name, values in out["results"].items()},
        "n_shot": _plain(out.get("n-shot", {})),
        "documents": documents,
    }


def _metric_keys(results: Mapping[str, Any]) -> set[str]:
    return {key for values in results.values() for key in values if "," in key and "_stderr" not in key}


def _plain(value: Any) -> Any:
    """lm-eval's results as JSON (its "N/A" and NaN stderr kept as null)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def document_values(value: Any) -> list[float]:
    """A document's metric as numbers: a list (IFEval's instruction-level accuracy) gives one per item."""
    values = value if isinstance(value, list) else [value]
    return [float(v) for v in values]


def task_summary(
    task: Mapping[str, Any], done: Mapping[str, Any], bootstrap: Mapping[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A task's score (mean of its per-document values, bootstrap CI), lm-eval's aggregate, and its scores rows."""
    metric = str(task["metric"])
    values = [v for doc in done["documents"] for v in document_values(doc["value"])]
    harness = done["lm_eval"].get(task["name"], {})
    summary = {
        "label": task["label"],
        "num_fewshot": int(task["num_fewshot"]),
        "metric": metric,
        "n_documents": len(done["documents"]),
        "summary": summarize(values, **bootstrap),
        "lm_eval_value": harness.get(metric),
        "lm_eval_stderr": harness.get(metric.replace(",", "_stderr,", 1)),
    }
    rows = [
        {
            "id": f"{task['name']}:{doc['id']}",
            "task": task["name"],
            "metrics": {metric: _mean(document_values(doc["value"]))},
        }
        for doc in done["documents"]
    ]
    return summary, rows


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def general_delta(
    other_dir: Path, per_task: Mapping[str, Any], scores: Sequence[Mapping[str, Any]], bootstrap: Mapping[str, Any]
) -> dict[str, Any]:
    """This run minus ``other_dir``'s run, per task (points, 0-100) and their mean over the tasks both ran
    (the paper's General Δ), with a paired bootstrap of each task on the documents both scored."""
    metrics_file = other_dir / "metrics.json"
    if not metrics_file.is_file() or not (other_dir / "scores.jsonl").is_file():
        raise FileNotFoundError(f"evaluator.compare_to={other_dir}: expected an evaluator=general run folder")
    other = json.loads(metrics_file.read_text()).get("eval", {}).get("general")
    if other is None:
        raise ValueError(f"evaluator.compare_to={other_dir}: that run has no evaluator=general results")
    other_scores = {row["id"]: row for row in read_jsonl(other_dir / "scores.jsonl")}
    tasks: dict[str, Any] = {}
    for name, mine in per_task.items():
        theirs = other.get(name)
        if theirs is None or theirs["metric"] != mine["metric"] or theirs["num_fewshot"] != mine["num_fewshot"]:
            continue
        shared = [r for r in scores if r["task"] == name and r["id"] in other_scores]
        metric = mine["metric"]
        entry = {
            "label": mine["label"],
            "this": 100 * mine["summary"]["mean"],
            "other": 100 * theirs["summary"]["mean"],
            "delta": 100 * (mine["summary"]["mean"] - theirs["summary"]["mean"]),
            "shared_documents": len(shared),
        }
        if shared:
            paired = paired_bootstrap(
                [other_scores[r["id"]]["metrics"][metric] for r in shared],
                [r["metrics"][metric] for r in shared],
                **bootstrap,
            )
            entry["paired"] = {
                k: (100 * v if k in ("delta", "ci_low", "ci_high") and v is not None else v) for k, v in paired.items()
            }
        tasks[name] = entry
    skipped = sorted(set(per_task) - set(tasks))
    return {
        "run": other_dir.name,
        "tasks": tasks,
        "mean_delta": _mean([t["delta"] for t in tasks.values()]),
        "tasks_not_compared": skipped,
    }


def report_sections(results: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, t in results["general"].items():
        s = t["summary"]
        ci = f"[{100 * s['ci_low']:.2f}, {100 * s['ci_high']:.2f}]" if s["ci_low"] is not None else "-"
        harness = "-" if t["lm_eval_value"] is None else f"{100 * t['lm_eval_value']:.2f}"
        rows.append(
            f"| {t['label']} | `{name}` | {t['num_fewshot']} | `{t['metric']}` | {t['n_documents']} | "
            f"{100 * s['mean']:.2f} {ci} | {harness} |"
        )
    out = [
        f"## General benchmarks (lm-eval {results['lm_eval_version']})\n\n"
        "Score: mean of the per-document values x 100 [95% bootstrap CI]; lm-eval: the harness's own aggregate. "
        + (
            f"Resumed from earlier files: {', '.join(results['resumed_tasks'])}.\n\n"
            if results["resumed_tasks"]
            else "\n\n"
        )
        + "| benchmark | task | shots | metric | documents | score | lm-eval |\n"
        + "| --- | --- | --- | --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + f"\n\nMean over the tasks: {results['general_mean']:.2f}"
    ]
    delta = results.get("general_delta")
    if delta:
        lines = [
            f"| {t['label']} | {t['other']:.2f} | {t['this']:.2f} | {t['delta']:+.2f} | "
            + (
                f"[{t['paired']['ci_low']:+.2f}, {t['paired']['ci_high']:+.2f}] | {t['paired']['p_value']:.4f} |"
                if "paired" in t
                else "- | - |"
            )
            for t in delta["tasks"].values()
        ]
        mean = "-" if delta["mean_delta"] is None else f"{delta['mean_delta']:+.2f}"
        out.append(
            f"### General Δ against `{delta['run']}`: {mean} points\n\n"
            "| benchmark | other | this | Δ | paired 95% CI | p |\n| --- | --- | --- | --- | --- | --- |\n"
            + "\n".join(lines)
            + (
                f"\n\nNot compared (absent or set differently there): {', '.join(delta['tasks_not_compared'])}"
                if delta["tasks_not_compared"]
                else ""
            )
        )
    return out


BENCHMARKS.register("general")(General())
