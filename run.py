"""Train and/or evaluate one configuration: `python run.py [group=option ...] [key=value ...]`."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

CONF_DIR = str(Path(__file__).resolve().parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from rpbench.pipeline import run

    run(cfg)


if __name__ == "__main__":
    main()
