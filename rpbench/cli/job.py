"""One Hydra job: the composed config validated into its task's typed run and run (``run.py`` and the
``rpbench`` command's train, eval, synthesize, serve and sweep). A user error (``RpbenchError``) is one line
on stderr, its traceback in the run's log; a single run it stops before it wrote anything leaves no folder.
Anything else is a crash with its traceback. Ctrl-C exits with status 130; an interrupted or crashed run with
a checkpoint says how to resume it."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
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


def file_handlers() -> list[logging.FileHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]


def report_user_error(error: Exception) -> None:
    """One message on stderr; the traceback to the run's log files only (not the console)."""
    record = logging.LogRecord(
        "rpbench", logging.ERROR, __file__, 0, "%s", (error,), (type(error), error, error.__traceback__)
    )
    logs = file_handlers()
    for handler in logs:
        handler.handle(record)
    where = "".join(f"\n(traceback in {shown(h.baseFilename)})" for h in logs)
    print(f"error: {error}{where}", file=sys.stderr)


def holds_nothing(folder: Path) -> bool:
    """Whether the job's folder holds only what every job writes before it runs (Hydra's record, the job's
    log) and ``error.txt``."""
    from hydra.core.hydra_config import HydraConfig

    logs = {Path(h.baseFilename).name for h in file_handlers() if Path(h.baseFilename).parent == folder}
    own = {*logs, "error.txt", HydraConfig.get().output_subdir}
    return all(p.name in own for p in folder.iterdir())


def discard(folder: Path, output_root: Path) -> None:
    """Remove the job's folder (its log closed first), and the folder above it when that is left empty below
    ``output_root`` (``outputs/<run_name>/``)."""
    for handler in file_handlers():
        if Path(handler.baseFilename).parent == folder:
            logging.getLogger().removeHandler(handler)
            handler.close()
    shutil.rmtree(folder)
    parent, root = folder.parent.resolve(), output_root.resolve()
    if parent != root and parent.is_relative_to(root) and not any(parent.iterdir()):
        parent.rmdir()


def stopped_message(stopped: str, out_dir: Path, step: int | None) -> str | None:
    """How to resume the job in ``out_dir`` after it ``stopped``; None without a checkpoint to resume."""
    from hydra.core.hydra_config import HydraConfig

    from rpbench.cli.resume_hint import resume_command, resume_message
    from rpbench.training.resume import last_checkpoint

    checkpoint = last_checkpoint(out_dir)
    if not checkpoint.is_file():
        return None
    command = resume_command(sys.argv[0], HydraConfig.get().overrides.task, shown(str(out_dir)))
    return resume_message(stopped, shown(str(checkpoint)), step, command)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def run_job(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from rpbench.core.quiet import quiet_libraries

    quiet_libraries()
    from rpbench.core.errors import RpbenchError
    from rpbench.pipeline import is_rank_zero, run
    from rpbench.serve.running import local_judge, serve_run
    from rpbench.synth.synthesize import synthesize_run
    from rpbench.training.interrupt import TrainingInterrupted
    from rpbench.validate import validate

    # judge=local: the pipeline hands rpbench's server in itself; the synthesis task is handed it here
    tasks = {
        "train_eval": run,
        "synthesize": partial(synthesize_run, local_judge_server=local_judge),
        "serve": serve_run,
    }
    out_dir = Path(cfg.paths.output_dir)
    error_file = out_dir / "error.txt"  # why the job failed (a sweep's summary lists it)
    error_file.unlink(missing_ok=True)  # from an earlier attempt in this folder
    single = HydraConfig.get().mode == RunMode.RUN
    try:
        tasks[cfg.task](validate(cfg))  # validate refuses an unknown task
    except KeyboardInterrupt as interrupt:  # Ctrl-C
        error_file.write_text(f"{type(interrupt).__name__}: {interrupt or 'interrupted'}\n")
        if is_rank_zero():
            step = interrupt.step if isinstance(interrupt, TrainingInterrupted) else None
            message = stopped_message("interrupted", out_dir, step)
            print(message or "interrupted before a checkpoint was written: a re-run starts over", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if single and isinstance(error, RpbenchError) and holds_nothing(out_dir):  # stopped before it ran
            discard(out_dir, Path(cfg.paths.output_root))
            report_user_error(error)
            sys.exit(1)
        error_file.parent.mkdir(parents=True, exist_ok=True)
        error_file.write_text(f"{type(error).__name__}: {error}\n")
        if not isinstance(error, RpbenchError):
            message = stopped_message(f"the run crashed ({type(error).__name__})", out_dir, None)
            if message and is_rank_zero():  # after the traceback Hydra prints
                atexit.register(print, message, file=sys.stderr)
            raise
        report_user_error(error)
        if not single:
            raise  # the sweep goes on with its other jobs and lists this one as failed
        sys.exit(1)
