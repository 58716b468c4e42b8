"""``rpbench <command> ...``: the installed command (``python -m rpbench`` too). ``train``, ``eval``, ``synthesize``
and ``sweep`` take Hydra overrides, as ``run.py`` and ``sweep.py`` do; ``field`` takes its options, then Hydra
overrides; ``serve``, ``leaderboard`` and ``pairs`` take their modules' own arguments."""

from __future__ import annotations

import gc
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rpbench.cli.help_page import COMMANDS, group_page, main_page
from rpbench.cli.overrides import override_arguments, unknown_key_problems

HELP = {"-h", "--help"}
MULTIRUN = {"-m", "--multirun"}
# Hydra flags that print or inspect instead of running: they exclude --multirun, and skip the key check.
INSPECT = {"-c", "--cfg", "-i", "--info", "--hydra-help", "-sc", "--shell-completion"}


# From this 1-minute load average (other jobs' runnable processes: the run has not started), torch's threads wait
# passively.
BUSY_LOAD = 1.0


def wait_passively_when_busy() -> None:
    """torch's CPU threads (OpenMP) wait for each other after every operation, spinning by default: on free cores
    the fastest, but on cores other jobs use they burn the time a descheduled thread needs (the default run: 15
    minutes instead of 35 s on 2 shared cores, against 1.5-2.5 minutes waiting passively, and 4-5 s slower on
    free cores). The same threads split the same work either way: results do not change. Read when torch loads,
    so set before; an environment's own ``OMP_WAIT_POLICY`` wins."""
    if "OMP_WAIT_POLICY" not in os.environ and hasattr(os, "getloadavg") and os.getloadavg()[0] >= BUSY_LOAD:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def hydra_job(args: Sequence[str]) -> None:
    """One Hydra job (or multirun) of ``args``: unknown keys answered first, then ``rpbench.cli.job.run_job``."""
    if HELP & set(args):
        print(main_page())
        return
    if not INSPECT & set(args):
        problems = unknown_key_problems(args)
        if problems:
            sys.exit("error: " + "\nerror: ".join(problems))
    wait_passively_when_busy()
    from rpbench.cli.job import run_job

    sys.argv = [sys.argv[0], *args]
    try:
        run_job()
    finally:  # the process ends next: its last collections need not walk the heap (2-3 s on 2 cores)
        gc.freeze()


def chosen(args: Sequence[str], key: str) -> bool:
    """Whether the overrides choose ``key`` (``key=...``, ``+key=...`` or ``~key``)."""
    return any(a.lstrip("+~").split("=")[0] == key for a in override_arguments(args))


def train(args: Sequence[str]) -> None:
    hydra_job(args)


def evaluate(args: Sequence[str]) -> None:
    hydra_job(args if chosen(args, "objective") else ["objective=none", *args])


def synthesize(args: Sequence[str]) -> None:
    added = [] if chosen(args, "synth") else ["synth=rolemrc"]
    hydra_job(["task=synthesize", *added, *args])


def sweep(args: Sequence[str]) -> None:
    """A multirun of the overrides; ``--collect <sweep dir>`` rebuilds a finished or partly finished sweep's summary."""
    from rpbench.sweep_summary import SweepSummary, summarize

    if args[:1] == ["--collect"]:
        if len(args) != 2:
            sys.exit("usage: rpbench sweep --collect <sweep dir>")
        if summarize(Path(args[1])) is None:
            sys.exit(f"error: {args[1]}: no job folders (*/.hydra/overrides.yaml) in it")
        return
    args = list(args)
    if not (MULTIRUN | INSPECT | HELP) & {a.split("=")[0] for a in args}:
        args.insert(0, "--multirun")
    try:
        hydra_job(args)
    finally:  # a failed job stops Hydra before its multirun end: summarise what the jobs left
        if SweepSummary.pending is not None:
            summarize(SweepSummary.pending)


def field(args: Sequence[str]) -> None:
    """The field's benchmarks for one model, one run each, then their leaderboard (``rpbench.cli.field``)."""
    from rpbench.cli.field import main as field_main

    wait_passively_when_busy()
    sys.exit(field_main(args))


def module(name: str) -> Callable[[Sequence[str]], None]:
    """A command that runs ``python -m <name> <args>``."""

    def run(args: Sequence[str]) -> None:
        sys.argv = [f"rpbench {name.rsplit('.', 1)[-1]}", *args]
        runpy.run_module(name, run_name="__main__", alter_sys=True)

    return run


def show_help(args: Sequence[str]) -> None:
    print(group_page(args[0]) if args else main_page())


RUNNERS: dict[str, Callable[[Sequence[str]], None]] = {
    "train": train,
    "eval": evaluate,
    "synthesize": synthesize,
    "serve": module("rpbench.serve"),
    "sweep": sweep,
    "field": field,
    "leaderboard": module("rpbench.leaderboard"),
    "pairs": module("rpbench.synth.pairs_from_runs"),
    "variance": module("rpbench.conversation_variance"),
    "help": show_help,
}
assert set(RUNNERS) == {name for name, _ in COMMANDS}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in HELP:
        print(main_page())
        return
    command, rest = args[0], args[1:]
    if command not in RUNNERS:
        sys.exit(f"rpbench: no command {command!r}; commands: {', '.join(RUNNERS)} (rpbench --help)")
    RUNNERS[command](rest)
