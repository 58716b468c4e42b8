"""Train and/or evaluate one configuration: `python run.py [group=option ...] [key=value ...]`."""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from rpbench.pipeline import run

    run(cfg)


if __name__ == "__main__":
    main()
