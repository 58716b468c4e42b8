"""The ``${rpb.*}`` OmegaConf resolvers the configs use (registered on ``import rpbench``):

- ``${rpb.run_name:objective,model,data,init_from,probe,judge,env,task_overrides,short_run}``: a run's name,
  ``<objective>-<model>-<data>``, then what else tells it apart: ``-<file stem>`` for each data file given on
  the command line (``data.files.<split>=...``), ``-from-<run>`` for ``init_from`` (the earlier run's name),
  ``-env-<env>`` for a training environment, ``-probe-<probe>``, ``-judge-<backend>``, and last ``-<preset>``
  for a short run (``debug=short``: ``-short``; ``trainer.fast_dev_run`` set by hand: ``-fast_dev_run``);
- ``${rpb.short_run:debug_preset,fast_dev_run}``: why a run is short, its numbers a check that the pipeline
  works rather than a result (``debug=short``, ``trainer.fast_dev_run=True``); None for a full run;
- ``${rpb.slurm_tasks:devices}`` / ``${rpb.slurm_gpus:accelerator,devices}``: Slurm tasks and GPUs per node
  from the trainer (one task per device, as Lightning requires under Slurm).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf


def short_run(debug_preset, fast_dev_run) -> str | None:
    if debug_preset is not None:
        return f"debug={debug_preset}"
    return f"trainer.fast_dev_run={fast_dev_run}" if fast_dev_run else None


def short_suffix(why: str) -> str:
    """The run name's mark of a short run: the debug preset (``debug=short`` -> ``short``), else the trainer
    option's name (``trainer.fast_dev_run=True`` -> ``fast_dev_run``)."""
    key, _, value = why.partition("=")
    return value if key == "debug" else key.rsplit(".", 1)[-1]


def run_name(objective, model, data, init_from, probe, judge, env, task_overrides, short) -> str:
    parts = [str(objective), str(model), str(data)]
    for override in task_overrides or []:
        key, _, value = str(override).lstrip("+").partition("=")
        if key.startswith("data.files.") and value not in ("", "null"):
            parts.append(Path(value).stem)
    if init_from not in (None, "", "null"):
        from rpbench.data.files import run_label  # here: importing rpbench.data on `import rpbench` is heavy

        parts.append(f"from-{run_label(init_from)}")
    if str(env) != "none":
        parts.append(f"env-{env}")
    if str(probe) != "none":
        parts.append(f"probe-{probe}")
    if str(judge) != "none":
        parts.append(f"judge-{judge}")
    if short is not None:
        parts.append(short_suffix(str(short)))
    return "-".join(part.replace("/", "_") for part in parts)


def slurm_tasks(devices) -> int:
    if not isinstance(devices, int) or devices < 1:
        raise ValueError(
            f"trainer.devices={devices!r}: under Slurm give the number of GPUs per node (e.g. trainer.devices=8); "
            "Slurm starts one task per device"
        )
    return devices


def slurm_gpus(accelerator, devices) -> int | None:
    return slurm_tasks(devices) if str(accelerator) == "gpu" else None


def register() -> None:
    functions = {"run_name": run_name, "short_run": short_run, "slurm_tasks": slurm_tasks, "slurm_gpus": slurm_gpus}
    for name, function in functions.items():
        OmegaConf.register_new_resolver(f"rpb.{name}", function, replace=True)
