"""The R-EMID estimators that score every evaluated model: the critic p(y | x, r), the reasoning generator
q(r | x) and, optionally, a plain critic p(y | x) trained without r (``evaluator.critic`` / ``reasoner`` /
``plain_critic``).

A spec is one of:
- a CoRL run folder (its ``config.yaml`` and exported ``model/dialogue`` for a critic, ``model/reasoner``
  for the reasoner; ``model/`` when the run exported one model), checked at startup without loading it
  (``config.json``, safetensors headers, tokenizer files: ``model_folder_problems``);
- a local model folder (``config.json``, e.g. a pre-merged checkpoint), loaded with the settings of the
  instruct ``conf/model`` entries of its ``model_type``'s family (they must agree on how a chat is rendered);
- an rpbench ``conf/model`` entry name (e.g. ``qwen3-8b``, ``tiny-qwen3``), or a hub id that an entry names
  (``Qwen/Qwen3-8B``);
- ``self`` (critic only): the evaluated model scores itself; its EMI is then not comparable across models.
``<role>_adapters``: LoRA adapter folders (peft) merged on top one after the other, in the order given:
the released R-EMID estimator merges its SFT adapter into Qwen3-8B, then applies the ITER[2] GRPO adapter
(``[sft, grpo]``). ``provenance`` records each adapter's and each local folder's sha256. The reasoner is
never the evaluated model: its reasoning would carry the model's own answer into r.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError
from rpbench.core.paths import CONF_DIR
from rpbench.models.checks import model_folder_problems
from rpbench.models.config_tree import compose_model_config, model_entries
from rpbench.models.settings import ModelSettings

SELF = "self"
EXPORTED = {"critic": "dialogue", "reasoner": "reasoner", "plain_critic": "dialogue"}  # CoRL's model/<name>
RENDERING_KEYS = ("family", "instruct", "chat_template", "end_of_turn")  # what a critic's rows depend on


@dataclass(frozen=True)
class EstimatorModel:
    role: str
    model_cfg: ModelSettings | None  # None: the evaluated model (critic=self)
    adapters: tuple[str, ...]  # merged in this order
    description: str  # what the results name it (no machine path)


def resolve_spec(role: str, spec: str | None, adapters: Sequence[str]) -> EstimatorModel:
    """The model config of ``spec`` for ``role`` (module docstring); a clear ConfigError otherwise."""
    key = f"evaluator.{role}"
    adapters = tuple(str(a) for a in adapters)
    if spec is None:
        raise ConfigError(
            f"{key} is not set: the R-EMID analysis scores every model with one fixed critic and reasoner. "
            f"Set evaluator.critic and evaluator.reasoner (a CoRL run folder, a conf/model entry such as "
            f"qwen3-8b with evaluator.critic_adapters / reasoner_adapters, or critic=self), or "
            "evaluator.generalization.enabled=false"
        )
    spec = str(spec)
    if spec == SELF:
        if role == "reasoner":
            raise ConfigError(
                f"{key}=self: reasoning comes from a reasoning generator, never from the evaluated model "
                "(its reasoning would leak its own reply into r)"
            )
        if role != "critic":
            raise ConfigError(f"{key}=self: the plain critic is a fixed model trained without r, scoring every model")
        if adapters:
            raise ConfigError(f"{key}=self: {key}_adapters must be empty (the evaluated model is scored as it is)")
        return EstimatorModel(
            role, None, (), "the evaluated model (critic=self: its EMI is not comparable across models)"
        )
    folder = Path(spec).expanduser()
    if (folder / "config.yaml").is_file():
        found = _run_model(folder, role), f"{role} of run {folder.resolve().name}"
    elif (folder / "config.json").is_file():
        found = _folder_model(folder, key)
    else:
        found = _entry_model(spec, key)
    resolved = EstimatorModel(role, found[0], adapters, found[1] + _with(adapters))
    _check_adapters(resolved)  # at startup (validate), before anything is generated
    return resolved


def _entry_model(spec: str, key: str) -> tuple[ModelSettings, str]:
    entries = model_entries()
    if spec in entries:
        return compose_model_config(spec), f"model={spec}"
    for name in entries:
        entry = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
        if str(entry.get("name_or_path")) == spec:
            return compose_model_config(name), f"{spec} (model={name})"
    raise ConfigError(
        f"{key}={spec}: no run folder there (a CoRL run's folder holds config.yaml and model/), no model folder "
        f"(config.json), and not a conf/model entry ({', '.join(entries)}), a hub id one of them names, or self"
    )


def _folder_model(folder: Path, key: str) -> tuple[ModelSettings, str]:
    """A local model folder with the settings of its family's instruct entries (module docstring)."""
    from rpbench.models.families.base import FAMILIES

    problems = model_folder_problems(folder)
    if problems:
        raise ConfigError(f"{key}={folder}: this model folder cannot load: {'; '.join(problems)}")
    model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    families = [f for f in FAMILIES.names() if model_type in FAMILIES.get(f).model_types]
    entries = {}
    for name in model_entries():
        entry = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
        if entry.get("family") in families and entry.get("instruct") is True:
            entries[name] = compose_model_config(name)
    rendering = {tuple(getattr(cfg, k) for k in RENDERING_KEYS) for cfg in entries.values()}
    if len(rendering) != 1:
        problem = "no" if not entries else f"disagreeing ({', '.join(entries)})"
        raise ConfigError(
            f"{key}={folder}: model folder of model_type={model_type!r} with {problem} instruct conf/model "
            f"entries to load it with; give a conf/model entry or a run folder instead"
        )
    name, cfg = next(iter(entries.items()))
    cfg = replace(cfg, name=folder.resolve().name, name_or_path=str(folder), lora=None)
    return cfg, f"model folder {folder.resolve().name} (loaded as model={name})"


def _with(adapters: Sequence[str]) -> str:
    return "".join(f" + LoRA adapter {Path(a).name}" for a in adapters)


def _run_model(folder: Path, role: str) -> ModelSettings:
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
            model = ModelSettings.parse(
                OmegaConf.to_container(run_cfg.model, resolve=True), f"{folder}/config.yaml model"
            )
            return replace(model, name_or_path=str(candidate), lora=None)
    raise ConfigError(
        f"evaluator.{role}={folder}: no exported model in model/{EXPORTED[role]} or model/ "
        "(run it with save_model=true)"
    )


def _check_adapters(spec: EstimatorModel) -> None:
    for k, adapter in enumerate(spec.adapters):
        if not (Path(adapter) / "adapter_config.json").is_file():
            raise ConfigError(f"evaluator.{spec.role}_adapters[{k}]={adapter}: no adapter_config.json in it")


def load_estimator(spec: EstimatorModel, device):
    """(model, tokenizer) of a spec with a model config: loaded, each adapter merged in order, in eval mode on
    ``device``."""
    from rpbench.models import load

    _check_adapters(spec)
    model, tokenizer = load(spec.model_cfg)
    if spec.adapters:
        from peft import PeftModel

        for adapter in spec.adapters:
            model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.to(device).eval(), tokenizer


def folder_sha256(folder: Path) -> str:
    """sha256 over the folder's top-level files: each file's name and the sha256 of its bytes, by name."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).iterdir() if p.is_file()):
        content = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                content.update(block)
        digest.update(f"{path.name}\0{content.hexdigest()}\n".encode())
    return digest.hexdigest()


def provenance(spec: EstimatorModel) -> dict[str, Any]:
    """What metrics.json records of an estimator: its description, the sha256 of its weights folder when it is a
    local one (None: a hub id or the evaluated model), whether it is the evaluated model (critic=self), and each
    adapter's name and sha256 in merge order."""
    _check_adapters(spec)
    weights = None if spec.model_cfg is None else Path(spec.model_cfg.name_or_path).expanduser()
    return {
        "description": spec.description,
        "weights_sha256": folder_sha256(weights) if weights is not None and weights.is_dir() else None,
        "is_evaluated_model": spec.model_cfg is None,
        "adapters": [
            {"order": k, "name": Path(a).name, "sha256": folder_sha256(Path(a))} for k, a in enumerate(spec.adapters)
        ],
    }
