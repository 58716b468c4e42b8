"""Train and/or evaluate one configuration: `python run.py [group=option ...] [key=value ...]`."""

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

CONF_DIR = str(Path(__file__).resolve().parent / "conf")


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


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from rpbench.quiet import quiet_libraries

    quiet_libraries()
    from rpbench.data.errors import RpbenchError
    from rpbench.pipeline import run

    try:
        run(cfg)
    except RpbenchError as error:
        report_user_error(error)
        sys.exit(1)


if __name__ == "__main__":
    main()
