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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only

from rpbench.core.registry import Registry
from rpbench.core.typed import Problem, Settings, as_dict
from rpbench.data.files import run_label
from rpbench.data.records import EvalExample
from rpbench.models import chat_renderer
from rpbench.models.settings import ModelSettings
from rpbench.probes import before_after
from rpbench.probes.collect import collect_frequencies
from rpbench.probes.compare import compare_runs
from rpbench.probes.io import STATS_FILE, SUMMARY_FILE, load_stats, save_stats
from rpbench.probes.prompts import prompt_batches
from rpbench.probes.restraint import restrain, select_neurons
from rpbench.probes.stats import ProbeSettings

log = logging.getLogger(__name__)

RESTRAINED_DIR = "restrained"
RESTRAINT_FILE = "restraint.json"

Evaluate = Callable[[Path], dict]  # the run's evaluation again, into another folder (no logger)


@dataclass(frozen=True, kw_only=True)
class NoProbe(Settings):
    name: str


@dataclass(frozen=True)
class Probe:
    """A probe: ``run(ctx)`` returns its numbers plus ``report_sections``; ``settings_class`` types its
    ``probe`` group (parsed once at startup).

    ``needs_model``: it forwards the run's model (so the pipeline builds one and reads the test records);
    ``all_ranks``: it runs on every rank (it evaluates, which shards the records), else on rank zero only;
    ``needs_evaluation``: it compares against the run's evaluation (an evaluator must be chosen).
    """

    run: Callable[[ProbeContext], dict[str, Any]]
    settings_class: type[Settings]
    needs_model: bool
    all_ranks: bool = False
    needs_evaluation: bool = False


@dataclass(frozen=True)
class ProbeContext:
    """What the probe stage receives: its typed settings and the objects of the stages before it."""

    settings: Settings
    model: Any
    tokenizer: Any
    examples: Sequence[EvalExample] | None
    out_dir: Path
    model_config: ModelSettings  # the probed model's settings (its chat template)
    max_length: int  # data.max_length: the rendered conversation's limit
    max_prompt_length: int  # data.max_prompt_length
    evaluate: Evaluate | None = None  # the run's evaluation again, into another folder
    baseline_eval: Mapping[str, Any] | None = None  # the run's normal evaluation


PROBES = Registry("probe")


def run_probe(ctx: ProbeContext) -> dict[str, Any]:
    """Run the probe ``ctx.settings`` names; its numbers plus ``report_sections`` (markdown for report.md)."""
    name = ctx.settings.name
    probe = PROBES.get(name)
    if probe.needs_model and (ctx.model is None or ctx.tokenizer is None or ctx.examples is None):
        raise ValueError(f"probe={name} needs the run's model, tokenizer and test records")
    if not probe.all_ranks and rank_zero_only.rank != 0:
        return {"name": name, "report_sections": []}
    return probe.run(ctx)


def no_probe(ctx: ProbeContext) -> dict[str, Any]:
    return {"name": "none", "report_sections": []}


PROBES.register("none")(Probe(no_probe, NoProbe, needs_model=False))


# -- topk_freq ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FrequencySettings(ProbeSettings):
    """conf/probe/topk_freq.yaml: what is observed and counted (``modules``: a preset name or a list of patterns)
    and how the test prompts are rendered and batched."""

    name: str
    modules: str | tuple[str, ...]
    generation_header: bool
    batch_size: int

    def problems(self) -> list[Problem]:
        return super().problems() + ([] if self.batch_size >= 1 else [("batch_size", "an integer >= 1")])

    def observation(self) -> ProbeSettings:
        """What is observed and counted (a preset name is a list of one)."""
        modules = (self.modules,) if isinstance(self.modules, str) else self.modules
        return ProbeSettings(modules=modules, top_percent=self.top_percent, by=self.by, position=self.position)


def frequency_probe(ctx: ProbeContext) -> dict[str, Any]:
    """Top-p% frequencies per dimension over the test prompts, saved into ``ctx.out_dir``."""
    probe, settings = ctx.settings, ctx.settings.observation()
    if not ctx.examples:
        raise ValueError("probe=topk_freq: no test records to probe (data.files.test)")
    renderer = chat_renderer(ctx.model_config, ctx.tokenizer, ctx.max_length)
    header = probe.generation_header
    inputs = prompt_batches(ctx.examples, ctx.tokenizer, renderer, ctx.max_prompt_length, probe.batch_size, header)
    stats = collect_frequencies(ctx.model, inputs.batches, inputs.dims, settings)
    save_stats(stats, ctx.out_dir)
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


PROBES.register("topk_freq")(Probe(frequency_probe, FrequencySettings, needs_model=True))


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
@dataclass(frozen=True, kw_only=True)
class CompareSettings(Settings):
    """conf/probe/compare.yaml."""

    name: str
    runs: tuple[str, ...]
    labels: tuple[str, ...] | None
    top_n: int
    bins: int

    def problems(self):
        found = [] if self.top_n >= 1 else [("top_n", "an integer >= 1")]
        found += [] if self.bins >= 1 else [("bins", "an integer >= 1")]
        if self.labels is not None and (len(self.labels) != 2 or self.labels[0] == self.labels[1]):
            found.append(("labels", "null or two different labels [a, b]"))
        return found + probed_runs_problems(self.runs)


def probed_runs_problems(runs: Sequence[str]) -> list[Problem]:
    """``probe.runs`` must be two folders of runs with probe=topk_freq."""
    if len(runs) != 2:
        return [("runs", "two folders [a, b] of runs with probe=topk_freq")]
    missing = [run for run in runs if not (Path(run) / STATS_FILE).is_file()]
    return [f"runs: {run} holds no {STATS_FILE} (run it with probe=topk_freq first)" for run in missing]


def compare_labels(labels: Sequence[str] | None, runs: Sequence[Path]) -> tuple[str, str]:
    """``probe.labels``, else each run's name; two runs of one name are told apart by their folders
    (``<run_name>/<folder>``), and by their paths as given when those names match too."""
    if labels:
        if len(labels) != 2 or labels[0] == labels[1]:
            raise ValueError(f"probe.labels: expected two different labels [a, b], got {list(labels)!r}")
        return str(labels[0]), str(labels[1])
    a, b = run_label(runs[0]), run_label(runs[1])
    if a == b:
        a, b = f"{a}/{runs[0].name}", f"{b}/{runs[1].name}"
    return (a, b) if a != b else (str(runs[0]), str(runs[1]))


def compare_probe(ctx: ProbeContext) -> dict[str, Any]:
    """D_l, heatmaps and most changed neurons of ``probe.runs[1]`` against ``probe.runs[0]`` (no model)."""
    probe, out_dir = ctx.settings, ctx.out_dir
    runs = [Path(r) for r in probe.runs]
    if len(runs) != 2:
        raise ValueError(f"probe.runs: expected two probed run folders [a, b], got {[str(r) for r in runs]}")
    labels = compare_labels(probe.labels, runs)
    result = compare_runs(
        load_stats(runs[0]), load_stats(runs[1]), out_dir, labels=labels, top_n=probe.top_n, bins=probe.bins
    )
    result = {"name": "compare", **result, "D_l_mean": {d: sum(v) / len(v) for d, v in result["D_l"].items()}}
    result["report_sections"] = [(out_dir / result["table"]).read_text().rstrip("\n")]
    return result


PROBES.register("compare")(Probe(compare_probe, CompareSettings, needs_model=False))


# -- restraint ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RestraintSettings(Settings):
    """conf/probe/restraint.yaml."""

    name: str
    runs: tuple[str, ...]
    top_k: int
    dims: tuple[str, ...] | None
    neurons: Mapping[str, tuple[int, ...]] | None
    factor: float

    def problems(self):
        found = [] if self.top_k >= 1 else [("top_k", "an integer >= 1")]
        if self.neurons and self.runs:
            found.append(("neurons", "null when probe.runs is given (give one of them)"))
        elif not self.neurons:
            found += probed_runs_problems(self.runs)
        return found


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


def restraint_probe(ctx: ProbeContext) -> dict[str, Any]:
    """Evaluate with the chosen neurons scaled; compare with the run's evaluation per dimension."""
    if ctx.baseline_eval is None or ctx.evaluate is None:
        raise ValueError(
            "probe=restraint compares the normal evaluation with a restrained one: "
            "choose an evaluator (e.g. evaluator=rolemrc)"
        )
    probe = ctx.settings
    neurons = select_neurons(as_dict(probe))
    factor = probe.factor
    dtype = _model_dtype(ctx.model)
    identity = torch.tensor(factor, dtype=dtype).item() == 1.0
    if identity:
        log.warning("probe.factor=%s rounds to 1 in %s: the restraint leaves activations unchanged", factor, dtype)
    source = "explicit" if probe.neurons else "most changed between probe.runs"
    setting = {"factor": factor, "source": source, "neurons": neurons}
    folder = ctx.out_dir / RESTRAINED_DIR
    if rank_zero_only.rank == 0:
        _claim_folder(folder, setting)
    with restrain(ctx.model, neurons, factor):
        restrained = ctx.evaluate(folder)
    if rank_zero_only.rank != 0:
        return {"name": "restraint", "report_sections": []}
    table = before_after.before_after(ctx.baseline_eval, restrained)
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


PROBES.register("restraint")(
    Probe(restraint_probe, RestraintSettings, needs_model=True, all_ranks=True, needs_evaluation=True)
)
