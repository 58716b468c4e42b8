"""The ``rpbench`` command: its help pages are written from the config tree, an unknown key is answered with the
closest one before Hydra runs, and each command reaches what it names (``eval`` trains nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rpbench.cli.commands import RUNNERS, chosen
from rpbench.cli.help_page import GROUPS, description, group_page, main_page
from rpbench.cli.overrides import unknown_key_problems
from rpbench.core.paths import CONF_DIR


@pytest.fixture(scope="module")
def rpbench(repo_root, offline_env):
    def rpbench(
        *args: str, command: tuple[str, ...] = (sys.executable, "-m", "rpbench")
    ) -> subprocess.CompletedProcess:
        import os

        return subprocess.run(
            [*command, *args],
            cwd=repo_root,
            env={**os.environ, **offline_env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    return rpbench


def test_the_main_page_lists_every_command_and_every_option_of_the_groups_that_matter():
    page = main_page()
    assert all(f"\n  {name} " in page for name in RUNNERS)
    for group in GROUPS:
        assert all(option in page for option in (p.stem for p in (CONF_DIR / group).glob("*.yaml")))
    assert "tiny-qwen2*" in page and "sft*" in page and "--cfg job --package" in page
    assert "data/common" not in page and "tuning" not in page  # internal groups stay out


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_a_group_has_its_line(group):
    lines = group_page(group).splitlines()[1:]
    assert len(lines) == len(list((CONF_DIR / group).glob("*.yaml")))
    assert all(line[2:].split(maxsplit=1)[1:] for line in lines), [line for line in lines if len(line.split()) < 2]
    assert all(len(description(group, p.stem)) <= 104 for p in (CONF_DIR / group).glob("*.yaml"))


def test_a_misspelt_key_is_answered_with_the_closest_one_in_one_step():
    [problem] = unknown_key_problems(["objective.lrr=1e-5", "model=tiny-llama"])
    assert problem.startswith("objective.lrr=1e-5: no such key. Did you mean objective.lr=1e-5?")
    assert "Valid keys of objective: adam_betas" in problem
    [problem] = unknown_key_problems(["objectiv.lr=1"])
    assert "Did you mean objective.lr=1?" in problem
    assert unknown_key_problems(["objective.lr=1e-5", "+objective.extra=1", "model=tiny-llama", "seed=3"]) == []
    assert unknown_key_problems(["objective=dpo", "objective.beta=0.2"]) == []  # a key of the chosen option
    assert unknown_key_problems(["--cfg", "job", "seedd=3"])[0].startswith("seedd=3: no such key. Did you mean seed=3?")


def test_eval_trains_nothing_unless_an_objective_is_named():
    assert chosen(["objective=dpo"], "objective") and chosen(["+objective=dpo"], "objective")
    assert not chosen(["objective.lr=1"], "objective") and not chosen(["--cfg", "objective"], "objective")


@pytest.mark.slow
def test_the_commands_help_and_refuse_from_a_shell(rpbench):
    """What a user types: the installed script beside this Python, `python -m rpbench`, run.py and the serve
    command's own help; a misspelt key exits 1 with the answer alone on stderr."""
    script = Path(sys.executable).parent / "rpbench"
    assert script.exists(), "the rpbench command is not installed: pip install -e '.[dev]' (scripts/install.sh)"
    for command in ((str(script),), (sys.executable, "-m", "rpbench"), (sys.executable, "run.py")):
        result = rpbench("--help", command=command)
        assert result.returncode == 0 and "config groups" in result.stdout, result.stderr
    served = rpbench("serve", "--help")
    assert served.returncode == 0 and "max_batch_size" in served.stdout
    for command, option in (("leaderboard", "--by"), ("pairs", "--dimension")):
        result = rpbench(command, "--help")
        assert result.returncode == 0 and option in result.stdout, result.stderr
    typo = rpbench("train", "objective.lrr=1e-5")
    assert typo.returncode == 1 and typo.stderr.startswith("error: objective.lrr=1e-5: no such key. Did you mean")
    assert "+objective.lrr" not in typo.stderr and "Traceback" not in typo.stderr
    shown = rpbench("eval", "--cfg", "job", "--package", "objective")
    assert shown.returncode == 0 and "name: none" in shown.stdout, shown.stderr
