"""Write the resolved run config of every config-group option and experiment, one YAML per composition, so a
refactor can be checked to change no setting: run it before and after, then `diff -r before after`.

    python scripts/composed_configs.py OUT_DIR

Each file is `python run.py <group>=<option> --cfg job --resolve` less the keys that change per launch
(``sweep_name``, ``paths.output_dir``, the time-stamped run folder); keys are sorted, so only values show.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

import rpbench  # noqa: F401  (registers the ${rpb.*} resolvers)

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("data", "model", "objective", "evaluator", "judge", "probe", "trainer", "logger", "env", "serve", "debug")
EXTRA = (
    ("task=synthesize", "synth=rolemrc", "judge=local"),
    ("objective=grpo", "env=conversation", "judge=local"),
    ("task=serve", "model=tiny-qwen2-vl"),
)
PER_LAUNCH = ("sweep_name", "paths.output_dir")


def compositions() -> list[tuple[str, ...]]:
    runs: list[tuple[str, ...]] = [()]
    for group in (*GROUPS, "experiment"):
        for option in sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")):
            runs.append((f"{group}={option}",))
    return [*runs, *EXTRA]


def resolved(overrides: tuple[str, ...]) -> str:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["hydra.run.dir=/run", *overrides], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = "/run"
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
            for key in PER_LAUNCH:
                OmegaConf.update(cfg, key, None)
        return OmegaConf.to_yaml(OmegaConf.create(OmegaConf.to_container(cfg, resolve=True)), sort_keys=True)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for overrides in compositions():
        name = "_".join(overrides).replace("=", "-").replace("/", "-") or "default"
        try:
            text = resolved(overrides)
        except Exception as error:  # a composition that does not resolve is recorded as such: it must stay so
            text = f"error: {type(error).__name__}: {error}\n"
        (out / f"{name}.yaml").write_text(text)
    print(f"{len(compositions())} compositions written to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
