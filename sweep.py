"""Multirun sweeps, locally or on Slurm, with a summary grouped over seeds at the end:

python sweep.py objective=sft,dpo seed=1,2,3 hydra/launcher=slurm hydra.launcher.partition=<partition>
python sweep.py objective=sft,dpo seed=1,2,3 hydra/launcher=submitit_local   # one process per job
python sweep.py --collect outputs/multirun/<sweep>   # rebuild the summary of a finished or partly finished sweep
"""

import sys
from pathlib import Path

# Hydra options that print or inspect instead of running: they exclude --multirun.
INSPECT = {"-c", "--cfg", "-i", "--info", "-h", "--help", "--hydra-help", "-sc", "--shell-completion"}
MULTIRUN = {"-m", "--multirun"}


def collect(sweep_dir: str) -> int:
    from rpbench.sweep_summary import summarize

    if summarize(Path(sweep_dir)) is None:
        print(f"error: {sweep_dir}: no job folders (*/.hydra/overrides.yaml) in it", file=sys.stderr)
        return 1
    return 0


def sweep() -> None:
    from rpbench.sweep_summary import SweepSummary, summarize
    from run import main

    args = sys.argv[1:]
    if not (MULTIRUN | INSPECT) & {a.split("=")[0] for a in args}:
        sys.argv.insert(1, "--multirun")
    try:
        main()
    finally:  # a failed job stops Hydra before its multirun end: summarise what the jobs left
        if SweepSummary.pending is not None:
            summarize(SweepSummary.pending)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--collect"]:
        if len(sys.argv) != 3:
            sys.exit("usage: python sweep.py --collect <sweep dir>")
        sys.exit(collect(sys.argv[2]))
    sweep()
