"""Correlations of R-EMI with WinRate, of R-EMID with the WinRate difference and, per sample size n, of
the bound with R-EMID over several ``evaluator=rpgbench`` run folders (one per evaluated model), with
bootstrap intervals, and the pilot figure across runs (JS severity vs WinRate per category). Runs not
scored alike (critic, reasoner, encoder, prompts, settings, judges; critic=self) are refused, naming the
runs and what differs, unless --allow-mixed (the output then states it):

    python experiments/rpgbench/summarize.py <run_dir> <run_dir> ... --out-dir <dir> [--resamples 1000]

Writes summary.json, summary.md and js_vs_winrate.png to --out-dir and prints the table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rpbench.eval.generalization.summary import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    markdown,
    summarize_runs,
    write_summary,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=BOOTSTRAP_SEED, help="bootstrap seed")
    parser.add_argument("--score-with-id", action="store_true", help="add each run's IDTest point to the score setting")
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="correlate runs not scored alike (critic, reasoner, encoder, prompts, settings, judges; critic=self); "
        "the output states what differs",
    )
    args = parser.parse_args()
    summary = summarize_runs(args.runs, args.resamples, args.seed, args.score_with_id, args.allow_mixed)
    write_summary(summary, args.out_dir)
    print(markdown(summary))


if __name__ == "__main__":
    main()
