"""The R-EMID estimator pair that scores every evaluated model: the critic p(y | x, r) and the reasoning
generator q(r | x) (``evaluator.critic`` / ``evaluator.reasoner``).

A spec is one of:
- a CoRL run folder (its ``config.yaml`` and exported ``model/dialogue`` for the critic, ``model/reasoner``
  for the reasoner; ``model/`` when the run exported one model), checked at startup without loading it
  (``config.json``, safetensors headers, tokenizer files: ``model_folder_problems``);
- an rpbench ``conf/model`` entry name (e.g. ``qwen3-8b``, ``tiny-qwen3``), or a hub id that an entry names
  (``Qwen/Qwen3-8B``);
- ``self`` (critic only): the evaluated model scores itself; its EMI is then not comparable across models.
``critic_adapter`` / ``reasoner_adapter``: a LoRA adapter folder (peft) applied on top and merged, e.g. the
released R-EMID-Estimator adapters on Qwen3-8B. The reasoner is never the evaluated model: its reasoning
would carry the model's own answer into r.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rpbench.data.errors import ConfigError
from rpbench.models.checks import model_folder_problems
from rpbench.models.config_tree import CONF_DIR, compose_model_config, model_entries

SELF = "self"
EXPORTED = {"critic": "dialogue", "reasoner": "reasoner"}  # CoRL's model/<name> folders


@dataclass(frozen=True)
class EstimatorSpec:
    role: str
    model_cfg: dict[str, Any] | None  # None: the evaluated model (critic=self)
    adapter: str | None
    description: str  # what the results name it (no machine path)


def resolve_spec(role: str, spec: str | None, adapter: str | None) -> EstimatorSpec:
    """The model config of ``spec`` for ``role`` (module docstring); a clear ConfigError otherwise."""
    key = f"evaluator.{role}"
    if spec is None:
        raise ConfigError(
            f"{key} is not set: the R-EMID analysis scores every model with one fixed critic and reasoner. "
            f"Set evaluator.critic and evaluator.reasoner (a CoRL run folder, a conf/model entry such as "
            f"qwen3-8b with evaluator.critic_adapter / reasoner_adapter, or critic=self), or "
            "evaluator.generalization.enabled=false"
        )
    spec = str(spec)
    if spec == SELF:
        if role != "critic":
            raise ConfigError(
                f"{key}=self: reasoning comes from a reasoning generator, never from the evaluated model "
                "(its reasoning would leak its own reply into r)"
            )
        return EstimatorSpec(
            role, None, None, "the evaluated model (critic=self: its EMI is not comparable across models)"
        )
    folder = Path(spec).expanduser()
    if (folder / "config.yaml").is_file():
        return EstimatorSpec(role, _run_model(folder, role), adapter, f"{role} of run {folder.resolve().name}")
    entries = model_entries()
    if spec in entries:
        return EstimatorSpec(role, compose_model_config(spec), adapter, f"model={spec}" + _with(adapter))
    for name in entries:
        entry = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
        if str(entry.get("name_or_path")) == spec:
            return EstimatorSpec(role, compose_model_config(name), adapter, f"{spec} (model={name})" + _with(adapter))
    raise ConfigError(
        f"{key}={spec}: no run folder there (a CoRL run's folder holds config.yaml and model/), and not a "
        f"conf/model entry ({', '.join(entries)}), a hub id one of them names, or self"
    )


def _with(adapter: str | None) -> str:
    return "" if adapter is None else f" + LoRA adapter {Path(adapter).name}"


def _run_model(folder: Path, role: str) -> dict[str, Any]:
    run_cfg = OmegaConf.load(folder / "config.yaml")
    if "model" not in run_cfg:
        raise ConfigError(f"evaluator.{role}={folder}: its config.yaml has no model section")
    for candidate in (folder / "model" / EXPORTED[role], folder / "model"):
        if (candidate / "config.json").is_file():
            problems = model_folder_problems(candidate)
            if problems:
                raise ConfigError(
                    f"evaluator.{role}={folder}: its exported model cannot load: {'; '.join(problems)}. Re-export "
                    "it (re-run the CoRL run with save_model=true) or copy it again"
                )
            model = OmegaConf.to_container(run_cfg.model, resolve=False)
            return {**model, "name_or_path": str(candidate), "lora": None}
    raise ConfigError(
        f"evaluator.{role}={folder}: no exported model in model/{EXPORTED[role]} or model/ "
        "(run it with save_model=true)"
    )


def load_estimator(spec: EstimatorSpec, device):
    """(model, tokenizer) of a spec with a model config: loaded, the adapter merged, in eval mode on ``device``."""
    from rpbench.models import load

    model, tokenizer = load(spec.model_cfg)
    if spec.adapter is not None:
        from peft import PeftModel

        if not (Path(spec.adapter) / "adapter_config.json").is_file():
            raise ConfigError(f"evaluator.{spec.role}_adapter={spec.adapter}: no adapter_config.json in it")
        model = PeftModel.from_pretrained(model, spec.adapter).merge_and_unload()
    return model.to(device).eval(), tokenizer
