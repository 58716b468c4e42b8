"""What a stopped run says about resuming: where its checkpoint is and the command that continues it in its folder,
the entry the user ran with the job's overrides and ``hydra.run.dir=<its folder>``."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path


def entry(argv0: str) -> list[str]:
    """The command that runs one job as this one was started: ``rpbench train`` (``python -m rpbench train``)
    for the rpbench command, ``python run.py`` for run.py and sweep.py (a sweep's job resumes as one run)."""
    path = Path(argv0)
    if path.name == "__main__.py":
        return ["python", "-m", "rpbench", "train"]
    if path.name == "rpbench":
        return ["rpbench", "train"]
    if path.name in ("run.py", "sweep.py"):
        return ["python", str(path.with_name("run.py"))]
    return ["python", "run.py"]


def resume_command(argv0: str, overrides: Sequence[str], run_dir: str) -> str:
    """The shell command that resumes the job of ``overrides`` (Hydra's task overrides) in ``run_dir``: a
    ``ckpt_path`` given is replaced by ``last``, the folder's checkpoint."""
    kept = [o for o in overrides if o.lstrip("+~").partition("=")[0] != "ckpt_path"]
    last = ["ckpt_path=last"] if len(kept) < len(overrides) else []
    return shlex.join([*entry(argv0), *kept, *last, f"hydra.run.dir={run_dir}"])


def resume_message(stopped: str, checkpoint: str, step: int | None, command: str) -> str:
    """Two lines: why the run ``stopped``, the checkpoint (at optimizer ``step`` when known) and the command."""
    held = f" (optimizer step {step})" if step is not None else ""
    return f"{stopped}; the checkpoint {checkpoint}{held} resumes with:\n  {command}"
