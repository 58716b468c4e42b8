"""The command a stopped run prints to resume it: the entry it was started with, its overrides (quoted for a
shell, a ``ckpt_path`` given replaced by ``last``) and ``hydra.run.dir=<its folder>``. The run that prints it:
tests/test_interrupt.py."""

from __future__ import annotations

import pytest

from rpbench.cli.resume_hint import entry, resume_command


@pytest.mark.parametrize(
    ("argv0", "command"),
    [
        ("run.py", ["python", "run.py"]),
        ("../rpbench/sweep.py", ["python", "../rpbench/run.py"]),  # a sweep's job resumes as one run
        ("/home/me/.venv/bin/rpbench", ["rpbench", "train"]),
        ("/home/me/rpbench/rpbench/__main__.py", ["python", "-m", "rpbench", "train"]),
        ("-c", ["python", "run.py"]),  # not known: run.py
    ],
)
def test_the_resume_command_uses_the_entry_the_run_was_started_with(argv0, command):
    assert entry(argv0) == command


def test_the_resume_command_quotes_the_overrides_and_resumes_the_folder_s_last_checkpoint():
    overrides = ["objective=dpo", "ckpt_path=/old/x.ckpt", "+trainer.callbacks=[{_target_: a.B}]", "seed=1"]
    command = resume_command("run.py", overrides, "outputs/my run/2026")
    assert command == (
        "python run.py objective=dpo '+trainer.callbacks=[{_target_: a.B}]' seed=1 ckpt_path=last "
        "'hydra.run.dir=outputs/my run/2026'"
    )
    assert resume_command("run.py", ["seed=1"], "out") == "python run.py seed=1 hydra.run.dir=out"
