"""The ``rpbench`` help pages, written from the config tree itself: each group's options with the first sentence
of the comment their YAML file opens with, and the option ``conf/config.yaml`` picks by default."""

from __future__ import annotations

import re
import textwrap

from rpbench.core.paths import CONF_DIR

COMMANDS = (
    ("train", "train, then evaluate, one run (the same as `python run.py ...`)"),
    ("eval", "evaluate without training (objective=none unless an objective is named)"),
    ("synthesize", "build a RoleMRC-format data set with a generator model (task=synthesize, synth=rolemrc)"),
    ("serve", "serve one model over OpenAI's HTTP API (`rpbench serve --help`)"),
    ("sweep", "a multirun, locally or on Slurm, summarised over seeds (the same as `python sweep.py ...`)"),
    ("field", "every benchmark of conf/field.yaml for one model, one run each, then their leaderboard"),
    ("leaderboard", "rank the runs of folders and sweeps, with CIs (`rpbench leaderboard --help`)"),
    ("pairs", "multi-turn preference pairs from judged conversation runs (`rpbench pairs --help`)"),
    ("variance", "a conversation sweep's score variance by policy, simulator, judge (`rpbench variance --help`)"),
    ("help", "`rpbench help <group>`: every option of a config group, one line each"),
)
RECIPES = (
    ("rpbench train", "the offline default: a tiny model trained and evaluated (~40 s)"),
    ("rpbench train debug=short", "the same, shorter: 3 steps, 8 test records"),
    ("rpbench train model=smollm2-135m-instruct debug=short", "a real chat model on 2 CPU cores"),
    ("rpbench train experiment=rolemrc_sft_qwen2.5-7b", "RoleMRC's SFT on GPUs (then rolemrc_dpo_*)"),
    ("rpbench train experiment=rpgbench_corl_qwen3-4b", "RPGBench's CoRL (GPUs)"),
    ("rpbench eval data=sample_conversation judge=local", "whole conversations with a simulated user"),
    ("rpbench sweep objective=sft,dpo seed=1,2,3", "a multirun (hydra/launcher=slurm: on Slurm)"),
    ("rpbench field judge=local", "the field's bundled samples for one model, then their leaderboard"),
    ("rpbench leaderboard outputs", "rank every run under outputs/"),
)
DESCRIBED_CHARS = 100  # an option's line in `rpbench help <group>` is cut here
# The groups a user chooses among, in the order they matter; the others are internal (shared files).
GROUPS = (
    "data",
    "model",
    "objective",
    "evaluator",
    "judge",
    "env",
    "probe",
    "trainer",
    "logger",
    "debug",
    "experiment",
)
INSPECT = (
    "Inspect before running: `rpbench train <overrides> --cfg job` prints the composed config, `--cfg job --package "
    "objective` one group of it, `--resolve` with interpolations resolved. `rpbench help <group>` lists a group's "
    "options. Hydra's own flags (--info, --hydra-help, --multirun) work as well."
)


def options(group: str) -> list[str]:
    """The options of a config group (its YAML files' names)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def description(group: str, option: str) -> str:
    """The first sentence of the comment ``conf/<group>/<option>.yaml`` opens with ("" without one)."""
    comment = []
    for line in (CONF_DIR / group / f"{option}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# ").strip())
    first = re.split(r"(?<=[.!?])\s", " ".join(comment), maxsplit=1)[0].rstrip(".")
    return first if len(first) <= DESCRIBED_CHARS else first[: first.rfind(" ", 0, DESCRIBED_CHARS)] + " ..."


def default_options() -> dict[str, str | None]:
    """The option ``conf/config.yaml``'s defaults list picks per group (None: none unless chosen)."""
    chosen: dict[str, str | None] = {}
    for match in re.finditer(r"^\s*-\s*(?:optional\s+)?(\w+):\s*(\S+)", (CONF_DIR / "config.yaml").read_text(), re.M):
        chosen.setdefault(match[1], None if match[2] == "null" else match[2])
    return chosen


def group_page(group: str) -> str:
    """Every option of ``group`` with its one line; the default marked."""
    if group not in {p.name for p in CONF_DIR.iterdir() if p.is_dir()}:
        return f"rpbench help: no config group {group!r}; groups: {', '.join(GROUPS)}"
    default = default_options().get(group)
    names = options(group)
    width = max(map(len, names)) + 2
    lines = [f"{group}=<option> (conf/{group}/; {'default ' + default if default else 'none by default'}):"]
    for name in names:
        mark = "*" if name == default else " "
        lines.append(f" {mark}{name:<{width}}{description(group, name)}")
    return "\n".join(lines)


def main_page() -> str:
    """``rpbench --help``: the commands, recipes to start from and the groups with their options."""
    width = max(len(name) for name, _ in COMMANDS) + 2
    commands = "\n".join(f"  {name:<{width}}{text}" for name, text in COMMANDS)
    recipe_width = max(len(command) for command, _ in RECIPES) + 2
    recipes = "\n".join(f"  {command:<{recipe_width}}{text}" for command, text in RECIPES)
    defaults = default_options()
    groups = []
    for group in GROUPS:
        listed = ", ".join(f"{o}*" if o == defaults.get(group) else o for o in options(group))
        groups.append(textwrap.fill(listed, 110, initial_indent=f"  {group:<11}", subsequent_indent=" " * 13))
    return (
        "rpbench: train and evaluate role-playing LLMs (RoleMRC, MMRole, RPGBench / R-EMID).\n\n"
        "usage: rpbench <command> [<group>=<option> ...] [<key>=<value> ...]\n\n"
        f"commands:\n{commands}\n\nrecipes:\n{recipes}\n\n"
        f"config groups (<group>=<option>; * the default; `rpbench help <group>` says what each option is):\n"
        + "\n".join(groups)
        + "\n\n"
        + textwrap.fill(INSPECT, 110)
        + "\n"
    )
