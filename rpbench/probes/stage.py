"""The probe step of stage 4, as the pipeline calls it after evaluation (``probe=<name>``).

Each probe is a ``Probe`` registered in ``PROBES`` under its name:

- ``topk_freq``: top-p% activation frequencies per evaluation dimension over the test prompts,
  saved to the run folder (probe_stats.pt, probe_stats.json).
- ``compare``: two probed runs (``probe.runs=[a, b]``) -> D_l table, heatmaps, most changed neurons;
  needs no model.
- ``restraint``: evaluate again with chosen neurons scaled (into ``<run>/restrained``) and compare with
  the normal evaluation per dimension (RoleMRC Table 6).

Only rank zero probes and writes; under restraint every rank generates (the evaluation shards records).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import OmegaConf

from rpbench.data.files import run_label
from rpbench.data.records import EvalExample
from rpbench.models import chat_renderer
from rpbench.probes import before_after
from rpbench.probes.collect import collect_frequencies
from rpbench.probes.compare import compare_runs
from rpbench.probes.io import STATS_FILE, SUMMARY_FILE, load_stats, save_stats
from rpbench.probes.prompts import prompt_batches
from rpbench.probes.restraint import restrain, select_neurons
from rpbench.probes.stats import ProbeSettings
from rpbench.registry import Registry

log = logging.getLogger(__name__)

RESTRAINED_DIR = "restrained"
RESTRAINT_FILE = "restraint.json"

Evaluate = Callable[[Path], dict]  # the run's evaluation again, into another folder (no logger)


@dataclass(frozen=True)
class Probe:
    """A probe: ``run(cfg, model, tokenizer, test_examples, out_dir, evaluate, baseline_eval)`` returns its
    numbers plus ``report_sections``.

    ``needs_model``: it forwards the run's model (so the pipeline builds one and reads the test records);
    ``all_ranks``: it runs on every rank (it evaluates, which shards the records), else on rank zero only.
    """

    run: Callable[..., dict[str, Any]]
    needs_model: bool
    all_ranks: bool = False


PROBES = Registry("probe")


def probe_of(probe_cfg: Mapping) -> Probe:
    """The registered probe ``probe_cfg.name`` names."""
    name = str(probe_cfg["name"])
    if name not in PROBES:
        raise ValueError(f"probe={name}: unknown probe; choose one of {', '.join(PROBES.names())}")
    return PROBES.get(name)


def run_probe(
    cfg,
    model,
    tokenizer,
    test_examples: Sequence[EvalExample] | None,
    out_dir: str | Path,
    evaluate: Evaluate,
    baseline_eval: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``cfg.probe`` and return its numbers plus ``report_sections`` (markdown for report.md).

    ``evaluate`` is rpbench.eval.evaluate.evaluate; ``baseline_eval`` the result of the run's normal
    evaluation (required by restraint).
    """
    name = str(cfg.probe["name"])
    probe = probe_of(cfg.probe)
    if probe.needs_model and (model is None or tokenizer is None or test_examples is None):
        raise ValueError(f"probe={name} needs the run's model, tokenizer and test records")
    if not probe.all_ranks and rank_zero_only.rank != 0:
        return {"name": name, "report_sections": []}
    return probe.run(cfg, model, tokenizer, test_examples, Path(out_dir), evaluate, baseline_eval)


def no_probe(cfg, *_) -> dict[str, Any]:
    return {"name": "none", "report_sections": []}


PROBES.register("none")(Probe(no_probe, needs_model=False))


# -- topk_freq ----------------------------------------------------------------------------------------
def frequency_probe(cfg, model, tokenizer, examples: Sequence[EvalExample], out_dir: Path, *_) -> dict[str, Any]:
    """Top-p% frequencies per dimension over the test prompts, saved into ``out_dir``."""
    probe = cfg.probe
    settings = ProbeSettings.from_cfg(OmegaConf.to_container(probe, resolve=True))
    if not examples:
        raise ValueError("probe=topk_freq: no test records to probe (data.files.test)")
    renderer = chat_renderer(cfg.model, tokenizer, int(cfg.data.max_length))
    header = bool(probe.generation_header)
    inputs = prompt_batches(
        examples, tokenizer, renderer, int(cfg.data.max_prompt_length), int(probe.batch_size), header
    )
    stats = collect_frequencies(model, inputs.batches, inputs.dims, settings)
    save_stats(stats, out_dir)
    result = {
        "name": "topk_freq",
        "settings": asdict(settings),
        "generation_header": header,
        "records": inputs.n_records,
        "layers": stats.layers,
        "width": stats.width,
        "observations": {d: stats.num_observations(d) for d in stats.dims},
        "files": [STATS_FILE, SUMMARY_FILE],
    }
    result["report_sections"] = [_frequency_section(result)]
    return result


PROBES.register("topk_freq")(Probe(frequency_probe, needs_model=True))


def _frequency_section(result: Mapping[str, Any]) -> str:
    s = result["settings"]
    where = "the last prompt token" if s["position"] == "last_prompt" else "every real prompt token"
    where += (
        " (prompts rendered with the generation header: probe.generation_header=true; the authors' "
        "interpret.py renders without it)"
        if result["generation_header"]
        else " (prompts rendered without the generation header, as the authors' interpret.py)"
    )
    lines = [
        "## Probe: top-p% activation frequencies",
        "",
        f"{result['records']} test records, activations at {where} of modules `{', '.join(s['modules'])}` "
        f"({len(result['layers'])} hook points x {result['width']} neurons); per observation the neurons at or "
        f"above its top {s['top_percent']}% threshold by {s['by']} are counted. Statistics: "
        f"`{STATS_FILE}` (compare two runs with `probe=compare probe.runs=[A,B]`).",
    ]
    lines += ["", "| dimension | observations |", "| --- | --- |"]
    lines += [f"| {d} | {n} |" for d, n in result["observations"].items()]
    return "\n".join(lines)


# -- compare ------------------------------------------------------------------------------------------
def compare_labels(probe: Mapping, runs: Sequence[Path]) -> tuple[str, str]:
    """``probe.labels``, else each run's name; two runs of one name are told apart by their folders
    (``<run_name>/<folder>``), and by their paths as given when those names match too."""
    labels = probe.get("labels")
    if labels:
        if len(labels) != 2 or labels[0] == labels[1]:
            raise ValueError(f"probe.labels: expected two different labels [a, b], got {list(labels)!r}")
        return str(labels[0]), str(labels[1])
    a, b = run_label(runs[0]), run_label(runs[1])
    if a == b:
        a, b = f"{a}/{runs[0].name}", f"{b}/{runs[1].name}"
    return (a, b) if a != b else (str(runs[0]), str(runs[1]))


def compare_probe(cfg, model, tokenizer, examples, out_dir: Path, *_) -> dict[str, Any]:
    """D_l, heatmaps and most changed neurons of ``probe.runs[1]`` against ``probe.runs[0]`` (no model)."""
    probe = cfg.probe
    runs = [Path(str(r)) for r in (probe.get("runs") or [])]
    if len(runs) != 2:
        raise ValueError(f"probe.runs: expected two probed run folders [a, b], got {[str(r) for r in runs]}")
    labels = compare_labels(probe, runs)
    result = compare_runs(
        load_stats(runs[0]),
        load_stats(runs[1]),
        out_dir,
        labels=labels,
        top_n=int(probe.top_n),
        bins=int(probe.bins),
    )
    result = {"name": "compare", **result, "D_l_mean": {d: sum(v) / len(v) for d, v in result["D_l"].items()}}
    result["report_sections"] = [(out_dir / result["table"]).read_text().rstrip("\n")]
    return result


PROBES.register("compare")(Probe(compare_probe, needs_model=False))


# -- restraint ----------------------------------------------------------------------------------------
def _factor(probe: Mapping) -> float:
    factor = probe["factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor):
        raise ValueError(f"probe.factor: expected a finite number, got {factor!r}")
    return float(factor)


def _model_dtype(model) -> torch.dtype:
    return next(p.dtype for p in model.parameters() if p.is_floating_point())


def _claim_folder(folder: Path, setting: Mapping[str, Any]) -> None:
    """Record the restraint in ``folder``; refuse a folder holding predictions of another restraint."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RESTRAINT_FILE
    if path.is_file() and json.loads(path.read_text()) != setting:
        raise ValueError(
            f"{path}: this run folder holds predictions under another restraint; use a new run folder or remove it"
        )
    path.write_text(json.dumps(setting, indent=2))


def restraint_probe(
    cfg,
    model,
    tokenizer,
    examples: Sequence[EvalExample],
    out_dir: Path,
    evaluate: Evaluate,
    baseline_eval: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Evaluate with the chosen neurons scaled; compare with ``baseline_eval`` per dimension."""
    if baseline_eval is None:
        raise ValueError(
            "probe=restraint compares the normal evaluation with a restrained one: "
            "choose an evaluator (e.g. evaluator=rolemrc)"
        )
    probe = OmegaConf.to_container(cfg.probe, resolve=True)
    neurons = select_neurons(probe)
    factor = _factor(probe)
    dtype = _model_dtype(model)
    identity = torch.tensor(factor, dtype=dtype).item() == 1.0
    if identity:
        log.warning("probe.factor=%s rounds to 1 in %s: the restraint leaves activations unchanged", factor, dtype)
    source = "explicit" if probe.get("neurons") else "most changed between probe.runs"
    setting = {"factor": factor, "source": source, "neurons": neurons}
    folder = out_dir / RESTRAINED_DIR
    if rank_zero_only.rank == 0:
        _claim_folder(folder, setting)
    with restrain(model, neurons, factor):
        restrained = evaluate(folder)
    if rank_zero_only.rank != 0:
        return {"name": "restraint", "report_sections": []}
    table = before_after.before_after(baseline_eval, restrained)
    result = {
        "name": "restraint",
        **setting,
        "n_neurons": sum(len(v) for v in neurons.values()),
        "factor_is_identity_in_model_dtype": identity,
        "model_dtype": str(dtype).removeprefix("torch."),
        "folder": RESTRAINED_DIR,
        "before_after": table,
        "restrained_eval": {
            k: restrained[k] for k in ("n_records", "generation", "metrics", "judge") if k in restrained
        },
    }
    result["report_sections"] = [_restraint_section(result)]
    return result


def _restraint_section(result: Mapping[str, Any]) -> str:
    layers = result["neurons"]
    lines = [
        "## Probe: neuron restraint",
        "",
        f"{result['n_neurons']} neurons in {len(layers)} hook points ({result['source']}) scaled by "
        f"{result['factor']!r} during generation; restrained predictions and scores in `{result['folder']}/`.",
    ]
    if result["factor_is_identity_in_model_dtype"]:
        lines.append(f"**Warning:** the factor rounds to 1 in {result['model_dtype']}: activations are unchanged.")
    lines += ["", before_after.markdown(result["before_after"])]
    return "\n".join(lines)


PROBES.register("restraint")(Probe(restraint_probe, needs_model=True, all_ranks=True))
