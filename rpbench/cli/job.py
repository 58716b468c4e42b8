"""One Hydra job: the composed config validated into its task's typed run and run (``run.py`` and the
``rpbench`` command's train, eval, synthesize, serve and sweep). A user error (``RpbenchError``) is one line
on stderr, its traceback in the run's log; anything else is a crash with its traceback."""

from __future__ import annotations

import logging
import os
import sys
from functools import partial
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rpbench.core.paths import CONF_DIR


def shown(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def report_user_error(error: Exception) -> None:
    """One message on stderr; the traceback to the run's log files only (not the console)."""
    record = logging.LogRecord(
        "rpbench", logging.ERROR, __file__, 0, "%s", (error,), (type(error), error, error.__traceback__)
    )
    logs = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for handler in logs:
        handler.handle(record)
    where = "".join(f"\n(traceback in {shown(h.baseFilename)})" for h in logs)
    print(f"error: {error}{where}", file=sys.stderr)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def run_job(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from rpbench.core.quiet import quiet_libraries

    quiet_libraries()
    from rpbench.core.errors import RpbenchError
    from rpbench.pipeline import run
    from rpbench.serve.running import local_judge, serve_run
    from rpbench.synth.synthesize import synthesize_run
    from rpbench.validate import validate

    # judge=local: the pipeline hands rpbench's server in itself; the synthesis task is handed it here
    tasks = {
        "train_eval": run,
        "synthesize": partial(synthesize_run, local_judge_server=local_judge),
        "serve": serve_run,
    }
    error_file = Path(cfg.paths.output_dir) / "error.txt"  # why the job failed (a sweep's summary lists it)
    error_file.unlink(missing_ok=True)  # from an earlier attempt in this folder
    try:
        tasks[cfg.task](validate(cfg))  # validate refuses an unknown task
    except Exception as error:
        error_file.parent.mkdir(parents=True, exist_ok=True)
        error_file.write_text(f"{type(error).__name__}: {error}\n")
        if not isinstance(error, RpbenchError):
            raise
        report_user_error(error)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # the sweep goes on with its other jobs and lists this one as failed
        sys.exit(1)
