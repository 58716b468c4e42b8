"""Correlations of R-EMI with WinRate and of R-EMID with the WinRate difference over several
``evaluator=rpgbench`` run folders (one per evaluated model):

    python experiments/rpgbench/summarize.py <run_dir> <run_dir> ... [--out summary.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rpbench.eval.generalization.summary import summarize_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    text = json.dumps(summarize_runs(args.runs), indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
