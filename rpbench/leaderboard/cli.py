"""One leaderboard (leaderboard.md, .csv, .png) from many run folders: the command line of rpbench.leaderboard."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rpbench.leaderboard.board import ROWS, Rows, build
from rpbench.leaderboard.write import write


def leaderboard(folders: Sequence[Path], out_dir: Path, rows: Rows) -> Path | None:
    """Write the leaderboard of the runs in ``folders``, its rows as ``rows`` says, into ``out_dir``; None when
    no run has a cell."""
    board = build(folders, rows)
    for run, why in board.skipped:
        print(f"leaderboard: skipped {run}: {why}", file=sys.stderr, flush=True)
    if board.short:
        listed = ", ".join(f"{run} ({why})" for run, why in board.short)
        print(
            f"leaderboard: left out {len(board.short)} short runs (--with-short shows them, unranked): {listed}",
            file=sys.stderr,
            flush=True,
        )
    for (row, benchmark), cell in sorted(board.cells.items()):
        if cell.conflict:
            print(f"leaderboard: conflict in {row}, {benchmark}: {cell.conflict}", file=sys.stderr, flush=True)
    if not board.cells:
        return None
    path = write(board, out_dir)
    print(f"leaderboard: {path} ({len(board.rows)} rows by {board.by}, {len(board.benchmarks)} benchmarks)", flush=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rpbench.leaderboard", description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders, or folders holding runs (sweeps)")
    parser.add_argument("--out", type=Path, default=Path("."), help="where to write leaderboard.md/.csv/.png")
    parser.add_argument(
        "--by",
        choices=list(ROWS),
        default=Rows.by,
        help="what a row is: "
        + "; ".join(f"{name}: {what}" for name, what in ROWS.items())
        + " (default: %(default)s)",
    )
    parser.add_argument(
        "--with-short",
        action="store_true",
        help="show short runs (debug=<preset>, trainer.fast_dev_run) in rows of their own, never ranked; "
        "by default they are left out, counted and listed",
    )
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out}: a file, not a folder to write the leaderboard into", file=sys.stderr)
        return 1
    try:
        written = leaderboard(args.folders, args.out, Rows(args.by, args.with_short))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if written is None:
        print(
            f"error: no full run with a benchmark headline under {', '.join(map(str, args.folders))}", file=sys.stderr
        )
        return 1
    return 0
