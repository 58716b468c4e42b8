"""Multirun sweeps, locally or on Slurm, with a summary grouped over seeds at the end (`rpbench sweep`):

python sweep.py objective=sft,dpo seed=1,2,3 hydra/launcher=slurm hydra.launcher.partition=<partition>
python sweep.py objective=sft,dpo seed=1,2,3 hydra/launcher=submitit_local   # one process per job
python sweep.py --collect outputs/multirun/<sweep>   # rebuild the summary of a finished or partly finished sweep
"""

import sys

from rpbench.cli.commands import sweep

if __name__ == "__main__":
    sweep(sys.argv[1:])
