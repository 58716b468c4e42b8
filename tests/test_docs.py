"""README.md and docs/: every `python run.py` / `python sweep.py` command composes with Hydra (as
`--cfg job` would print it), and every option of every config group is documented."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest
import yaml

from rpbench.core.paths import CONF_DIR

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SCRIPTS = ("run.py", "sweep.py")
# Groups a user chooses (conf/config.yaml's defaults list) and Hydra's launcher group.
GROUPS = [
    "data",
    "model",
    "objective",
    "env",
    "trainer",
    "logger",
    "evaluator",
    "judge",
    "probe",
    "serve",
    "debug",
    "experiment",
    "external",
    "tuning",
    "paths",
    "hydra/launcher",
]


def commands(text: str) -> list[str]:
    """``python run.py|sweep.py ...`` commands: lines of fenced blocks (continued with a backslash) and
    inline code spans."""
    found = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            found += [m for m in re.findall(r"python (?:run|sweep)\.py[^&|;]*", line)]
    found += re.findall(r"`(python (?:run|sweep)\.py [^`]*)`", text)
    return [c.strip() for c in found]


def top_level_first(value: str) -> str:
    """A sweep value's first choice (``a,b,c`` -> ``a``), commas inside brackets or braces kept."""
    depth = 0
    for i, char in enumerate(value):
        depth += char in "[{" and 1 or char in "]}" and -1 or 0
        if char == "," and depth == 0:
            return value[:i]
    return value


def overrides(command: str) -> list[str] | None:
    """The Hydra overrides of a command (placeholders ``<...>`` filled in, a placeholder group choice left
    to its default, a sweep's first values); None for one that is not a single composable run."""
    words = shlex.split(re.sub(r"<[^<>]*>", "PLACEHOLDER", command), comments=True)
    script, words = words[1], words[2:]
    if "..." in words or "--collect" in words:
        return None
    out, skip = [], False
    for word in words:
        if skip or word in ("--cfg", "--resolve"):
            skip = word == "--cfg"
            continue
        key, _, value = word.partition("=")
        if value == "PLACEHOLDER" and "." not in key:
            continue  # a group chosen by the reader (model=<model>)
        out.append(f"{key}={top_level_first(value)}" if script == "sweep.py" else word)
    return out


def documented_commands() -> list[tuple[str, str]]:
    return [(page.name, c) for page in PAGES for c in commands(page.read_text())]


def test_the_pages_hold_commands():
    found = documented_commands()
    assert len([c for page, c in found if page == "README.md"]) >= 8 and len(found) >= 60


@pytest.mark.slow
def test_every_documented_command_composes():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    distinct: dict[tuple[str, ...], str] = {}
    for page, command in documented_commands():
        args = overrides(command)
        if args is not None:
            distinct.setdefault(tuple(args), f"{page}: {command}")
    failed = []
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for args, where in distinct.items():
            try:
                compose("config", list(args), return_hydra_config=True)
            except Exception as error:  # noqa: BLE001 - every failing command is listed
                failed.append(f"{where}\n    {type(error).__name__}: {str(error).splitlines()[0]}")
    GlobalHydra.instance().clear()
    assert not failed, "\n".join(failed)


def expand_braces(name: str) -> list[str]:
    """``a_{b,c}_{d,e}`` -> a_b_d, a_b_e, a_c_d, a_c_e."""
    parts = re.split(r"\{([^{}]*)\}", name)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def table_rows() -> dict[str, set[str]]:
    """docs/configuration.md's table: group -> the option names its row shows in backticks."""
    rows = {}
    for line in (REPO_ROOT / "docs" / "configuration.md").read_text().splitlines():
        match = re.match(r"\| `([\w/]+)` \|(.*)\|$", line)
        if match:
            rows[match[1]] = {n for code in re.findall(r"`([^`]+)`", match[2]) for n in expand_braces(code)}
    return rows


@pytest.mark.parametrize("group", GROUPS)
def test_every_config_group_option_is_documented(group):
    text = "\n".join(page.read_text() for page in PAGES)
    row = table_rows().get(group, set())
    options = [
        path.stem
        for path in sorted((CONF_DIR / group).glob("*.yaml"))
        if "unsupported" not in (yaml.safe_load(path.read_text()) or {})  # refused at startup, with why
    ]
    assert options, f"conf/{group} has no options"
    undocumented = [o for o in options if o not in row and f"{group}={o}" not in text]
    assert not undocumented, f"{group}: {undocumented} in neither docs/configuration.md's table nor a command"
