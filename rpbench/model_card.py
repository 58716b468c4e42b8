"""The model card (``model/README.md``) of a run's exported model: what it is and how it was made.

Written after training and again after evaluation, from the run config and results (metrics.json's
content): base model, data, objective, its hyperparameters, held-out loss and evaluation metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rpbench.atomic import partial_path, publish

# Objective keys that describe bookkeeping, not the optimisation.
NOT_HYPERPARAMETERS = {"name", "log_every_n_steps", "num_workers", "ref_cache", "val_every_n_steps", "rewards"}


def hyperparameters(cfg: DictConfig) -> dict[str, Any]:
    """The objective's scalar settings, the run length, the seed and LoRA settings, as configured."""
    objective = OmegaConf.to_container(cfg.objective, resolve=True)
    values = {k: v for k, v in objective.items() if k not in NOT_HYPERPARAMETERS and not isinstance(v, dict)}
    if cfg.trainer.max_steps != -1:
        values["max_steps"] = cfg.trainer.max_steps
    values["seed"] = cfg.seed
    if cfg.model.lora:
        values["lora"] = OmegaConf.to_container(cfg.model.lora, resolve=True)
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


def card_text(cfg: DictConfig, results: dict[str, Any]) -> str:
    base = str(cfg.init_from) if cfg.init_from else str(cfg.model.name_or_path)
    tiny = str(cfg.model.name_or_path).startswith("tiny:")
    front = ["---", "library_name: transformers", "tags: [rpbench, role-playing, " + str(cfg.objective.name) + "]"]
    if not tiny and not cfg.init_from:
        front.append(f"base_model: {base}")
    front.append("---")
    files = {split: str(path) for split, path in cfg.data.files.items() if path}
    lines = [
        *front,
        "",
        f"# {results['run_name']}",
        "",
        f"Trained with rpbench, objective `{cfg.objective.name}`, from "
        + (f"the model of run `{results['model']}`" if cfg.init_from else f"`{base}` (model config `{cfg.model.name}`)")
        + f", on data `{cfg.data.name}`.",
        "",
        "## Data",
        "",
        *(f"- {split}: `{path}`" for split, path in files.items()),
        "",
        "## Hyperparameters",
        "",
        "| setting | value |",
        "| --- | --- |",
        *(f"| {key} | {value} |" for key, value in hyperparameters(cfg).items()),
    ]
    if "train" in results:
        lines += ["", "## Training", "", *training_lines(results["train"])]
    sections = results.get("eval", {}).get("report_sections", [])
    lines += ["", *sections] if sections else ["", "## Evaluation", "", "Not evaluated (yet)."]
    if (Path(cfg.paths.output_dir) / "model" / "adapter").is_dir():
        lines += ["", "The LoRA adapter alone is in `adapter/` (load it with peft onto the base model)."]
    return "\n".join(lines) + "\n"


def write_model_card(cfg: DictConfig, results: dict[str, Any], model_dir: Path) -> Path:
    """``model_dir/README.md``, replaced whole."""
    final = model_dir / "README.md"
    partial = partial_path(final)
    partial.write_text(card_text(cfg, results))
    return publish(partial, final)
