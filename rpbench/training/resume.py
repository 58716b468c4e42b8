"""Resume a checkpoint only into the training it was written for.

The settings that shape training (model, training data, objective, trainer, seed, ``init_from``) and the
content digest of the records trained on (``data.records_sha256.<file>``: a file replaced at the same path
counts) are stored next to the checkpoints (``checkpoints/training_config.json``; earlier settings that differ,
after a ``resume=force``, are kept as ``training_config.<k>.json``) when training starts. A re-run that would
resume a checkpoint compares its own: the same settings resume; others stop the run, naming the keys that
differ and the two ways out (a new output folder, or ``resume=force``). ``objective.epochs`` may change and
``trainer.max_steps`` may grow: a checkpoint is resumed mid-epoch or at an epoch end (a run stopped on
``max_steps`` mid-epoch writes its last checkpoint at that step: ``LastCheckpoint``), so more epochs or steps
continue the run (the learning-rate schedule then spans the new length); fewer steps than the checkpoint was
written for are refused. Settings that only say how the run is watched (logging, progress bars, validation
frequency, loader workers) are not compared.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rpbench.core.atomic import partial_path, publish
from rpbench.core.errors import ConfigError

if TYPE_CHECKING:
    from rpbench.training.settings import TrainingSettings

log = logging.getLogger(__name__)

FINGERPRINT_FILE = "training_config.json"
RESUME_CHOICES = ("check", "force")
SHAPING_KEYS = ("seed", "init_from", "model", "data", "objective", "trainer")
LENGTH_KEYS = ("objective.epochs",)
GROWING_KEYS = ("trainer.max_steps",)  # more steps continue the run; fewer are not the run the checkpoint is of
# Keys of the compared groups that change neither the batches nor the weights.
NOT_COMPARED = {
    "data": ("files.test", "max_test_samples", "task_dimensions", "allow_overlap"),
    "objective": ("epochs", "log_every_n_steps", "num_workers", "val_every_n_steps"),
    "trainer": (
        "enable_progress_bar",
        "enable_model_summary",
        "limit_val_batches",
        "val_check_interval",
        "num_sanity_val_steps",
    ),
}
SHOWN_DIFFERENCES = 8


def last_checkpoint(out_dir: Path) -> Path:
    """Where a run folder's last checkpoint is written, and what a re-run in the folder resumes."""
    return out_dir / "checkpoints" / "last.ckpt"


def flatten(node: Any, prefix: str) -> dict[str, Any]:
    """``{"a.b": value}`` for every leaf under ``node`` (lists are leaves)."""
    if not isinstance(node, Mapping) or not node:
        return {prefix: node}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(flatten(value, f"{prefix}.{key}"))
    return flat


def shaping_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that shape training, flattened to dotted keys (LENGTH_KEYS included), of ``config``:
    the resolved run config's SHAPING_KEYS."""
    settings = {"seed": config["seed"], "init_from": config["init_from"]}
    for group in ("model", "data", "objective", "trainer"):
        skipped = tuple(f"{group}.{key}" for key in NOT_COMPARED.get(group, ()))
        for key, value in flatten(config[group], group).items():
            if not any(key == s or key.startswith(s + ".") for s in skipped):
                settings[key] = value
    for key in LENGTH_KEYS:
        group, name = key.split(".")
        settings[key] = config[group][name]
    return settings


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Key -> (stored value, current value) for each key whose values differ (a missing key: None)."""
    keys = sorted(set(stored) | set(current))
    return {k: (stored.get(k), current.get(k)) for k in keys if stored.get(k) != current.get(k)}


def fewer_steps(old: Any, new: Any) -> bool:
    """Whether the step limit ``new`` is below ``old`` (``-1``: no limit, the most)."""

    def steps(value: Any) -> float:
        return math.inf if value in (-1, None) else float(value)

    return steps(new) < steps(old)


def read_settings(checkpoint: Path) -> dict[str, Any] | None:
    """The training settings stored with ``checkpoint`` (its folder's FINGERPRINT_FILE); None without one; a
    file that is not a JSON object of settings is a ConfigError naming it."""
    path = checkpoint.parent / FINGERPRINT_FILE
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        stored, why = None, f"not valid JSON ({error})"
    else:
        why = f"a JSON object of settings, got {type(stored).__name__}"
    if not isinstance(stored, dict):
        raise ConfigError(
            f"{path}: the record of the settings {checkpoint.name} was written with is unreadable ({why}). Train in a "
            "new output folder (hydra.run.dir=<new folder>), or delete the file and resume anyway with resume=force"
        )
    return stored


def write_settings(fingerprint: Mapping[str, Any], checkpoint_dir: Path) -> None:
    """Store the run's training settings (``TrainingSettings.fingerprint``) where its checkpoints are written
    (whole, or not at all). Earlier settings that differ (a run resumed with ``resume=force``) are kept as
    ``training_config.<k>.json``: the folder's history of what trained it."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    path = checkpoint_dir / FINGERPRINT_FILE
    settings = json.dumps(dict(fingerprint), indent=2, sort_keys=True, default=str)
    if path.is_file() and path.read_text(encoding="utf-8") != settings:
        k = 1
        while (kept := path.with_name(f"{path.stem}.{k}{path.suffix}")).exists():
            k += 1
        path.rename(kept)
    partial = partial_path(path)
    partial.write_text(settings, encoding="utf-8")
    publish(partial, path)


def _shown(changes: Mapping[str, tuple[Any, Any]]) -> str:
    lines = [f"{key}: {old!r} -> {new!r}" for key, (old, new) in list(changes.items())[:SHOWN_DIFFERENCES]]
    if len(changes) > SHOWN_DIFFERENCES:
        lines.append(f"... and {len(changes) - SHOWN_DIFFERENCES} more")
    return "; ".join(lines)


def check_resume(training: TrainingSettings, checkpoint: str | None) -> list[str]:
    """Refuse (ConfigError) to resume ``checkpoint`` under other training settings than it was written with,
    unless ``resume`` is ``force``. Returns warnings for the run's results (a forced resume). Training
    stores its settings with ``write_settings`` when it starts."""
    current = json.loads(json.dumps(dict(training.fingerprint), default=str))  # as it reads back from the file
    warnings: list[str] = []
    if checkpoint is not None:
        stored = read_settings(Path(checkpoint))
        changes = differences(stored, current) if stored is not None else None
        shaping = {
            k: v
            for k, v in (changes or {}).items()
            if k not in LENGTH_KEYS and (k not in GROWING_KEYS or fewer_steps(*v))
        }
        if stored is None or shaping:
            shrunk = "".join(f"; {k} may grow to continue the run, not shrink" for k in GROWING_KEYS if k in shaping)
            what = (
                f"the settings that shape training differ from those it was written with ({_shown(shaping)}{shrunk})"
                if stored is not None
                else f"it has no record of the settings it was written with ({FINGERPRINT_FILE} beside it)"
            )
            if training.run.resume != "force":
                raise ConfigError(
                    f"ckpt_path={training.run.ckpt_path}: would resume {checkpoint}, but {what}. Train in a new "
                    "output folder (hydra.run.dir=<new folder>), or resume this checkpoint anyway with resume=force "
                    "(the results then say so)"
                )
            warnings.append(f"resume=force: resumed {checkpoint} although {what}")
        lengths = {k: v for k, v in (changes or {}).items() if k in (*LENGTH_KEYS, *GROWING_KEYS) and k not in shaping}
        if lengths:
            log.info("resuming with another length: %s", _shown(lengths))
    for warning in warnings:
        log.warning(warning)
    return warnings
