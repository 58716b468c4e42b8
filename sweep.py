"""Multirun sweeps, locally or on Slurm, with a summary table of every run at the end:

python sweep.py objective=sft,dpo seed=1,2,3 hydra/launcher=slurm
"""

import sys

from run import main

if __name__ == "__main__":
    if not {"-m", "--multirun"} & set(sys.argv[1:]):
        sys.argv.insert(1, "--multirun")
    main()
