"""The model card (``model/README.md``) of a run's exported model: what it is and how it was made.

Written after training and again after evaluation, from the training stage's settings (``TrainingSettings``) and
the results (metrics.json's content): base model, data, objective, its hyperparameters, held-out loss and
evaluation metrics. A local
file or folder is named by its name alone: the card is pushed to the Hub, this machine's paths stay here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from rpbench.core.atomic import partial_path, publish
from rpbench.core.typed import plain
from rpbench.training.settings import TrainingSettings

# Objective keys that describe bookkeeping, not the optimisation.
NOT_HYPERPARAMETERS = {"name", "log_every_n_steps", "num_workers", "ref_cache", "val_every_n_steps", "rewards"}


def hyperparameters(training: TrainingSettings) -> dict[str, Any]:
    """The objective's scalar settings, the run length, the seed and LoRA settings, as configured."""
    objective = {f.name: getattr(training.objective, f.name) for f in fields(training.objective)}
    values = {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in objective.items()
        if k not in NOT_HYPERPARAMETERS and not isinstance(v, Mapping)
    }
    if training.trainer.values["max_steps"] != -1:
        values["max_steps"] = training.trainer.values["max_steps"]
    values["seed"] = training.run.seed
    if training.model.lora is not None:
        values["lora"] = plain(training.model.lora)
    return values


def training_lines(train: dict[str, Any]) -> list[str]:
    """Samples, optimizer steps, and the held-out measures (loss, perplexity; DPO: reward accuracy, ...)
    before and after training."""
    samples = train["samples"]
    lines = [
        f"{samples['train']} training samples ({samples['val']} held out), {train['optimizer_steps']} optimizer steps."
    ]
    held_out = train.get("held_out")
    if held_out:
        names = [k for k in held_out["after"] if k not in ("step", "tokens", "pairs")]  # measures, not counts
        lines += ["", "| held-out | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
        for phase in ("before", "after"):
            lines.append(f"| {phase} training | " + " | ".join(f"{held_out[phase][n]:.4f}" for n in names) + " |")
    return lines


def is_local(name: str) -> bool:
    """Whether ``name`` is a path on this machine (absolute, or an existing file or folder), not a hub name."""
    return Path(name).expanduser().is_absolute() or Path(name).exists()


def shown(name: str) -> str:
    """``name`` as the card shows it: a local path by its last part, anything else (hub names) as it is."""
    return Path(name).name if is_local(name) else name


def data_files(files: Mapping[str, Any]) -> dict[str, str]:
    """Each configured data file (test sets: ``test.<set>``) as the card shows it."""
    out = {}
    for split, entry in files.items():
        sets = entry if isinstance(entry, Mapping) else {None: entry}
        for name, paths in sets.items():
            listed = [paths] if isinstance(paths, str) else list(paths or [])
            if listed:
                out[split if name is None else f"{split}.{name}"] = ", ".join(shown(str(p)) for p in listed)
    return out


def card_text(training: TrainingSettings, results: dict[str, Any], model_dir: Path) -> str:
    """The card of the model ``training`` exports to ``model_dir``."""
    base, init_from = training.model.name_or_path, training.run.init_from
    tiny = base.startswith("tiny:")
    front = ["---", "library_name: transformers", f"tags: [rpbench, role-playing, {training.objective.name}]"]
    if not tiny and not init_from and not is_local(base):
        front.append(f"base_model: {base}")
    front.append("---")
    files = data_files(training.data.files)
    lines = [
        *front,
        "",
        f"# {results['run_name']}",
        "",
        f"Trained with rpbench, objective `{training.objective.name}`, from "
        + (
            f"the model of run `{results['model']}`"
            if init_from
            else f"`{shown(base)}` (model config `{training.model.name}`)"
        )
        + f", on data `{training.data.name}`.",
        "",
        "## Data",
        "",
        *(f"- {split}: `{path}`" for split, path in files.items()),
        "",
        "## Hyperparameters",
        "",
        "| setting | value |",
        "| --- | --- |",
        *(f"| {key} | {value} |" for key, value in hyperparameters(training).items()),
    ]
    if "train" in results:
        lines += ["", "## Training", "", *training_lines(results["train"])]
    sections = results.get("eval", {}).get("report_sections", [])
    lines += ["", *sections] if sections else ["", "## Evaluation", "", "Not evaluated (yet)."]
    if (model_dir / "adapter").is_dir():
        lines += ["", "The LoRA adapter alone is in `adapter/` (load it with peft onto the base model)."]
    return "\n".join(lines) + "\n"


def write_model_card(training: TrainingSettings, results: dict[str, Any], model_dir: Path) -> Path:
    """``model_dir/README.md``, replaced whole."""
    final = model_dir / "README.md"
    partial = partial_path(final)
    partial.write_text(card_text(training, results, model_dir))
    return publish(partial, final)
