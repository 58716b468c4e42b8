"""``python -m rpbench.leaderboard``: one leaderboard from many runs (rpbench.leaderboard says what it shows)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rpbench.leaderboard.board import build
from rpbench.leaderboard.write import write


def leaderboard(folders: Sequence[Path], out_dir: Path) -> Path | None:
    """Write the leaderboard of the runs in ``folders`` into ``out_dir``; None when no run has a cell."""
    board = build(folders)
    for run, why in board.skipped:
        print(f"leaderboard: skipped {run}: {why}", file=sys.stderr, flush=True)
    if not board.cells:
        return None
    path = write(board, out_dir)
    print(f"leaderboard: {path} ({len(board.rows)} models, {len(board.benchmarks)} benchmarks)", flush=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rpbench.leaderboard", description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders, or folders holding runs (sweeps)")
    parser.add_argument("--out", type=Path, default=Path("."), help="where to write leaderboard.md/.csv/.png")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out}: a file, not a folder to write the leaderboard into", file=sys.stderr)
        return 1
    try:
        written = leaderboard(args.folders, args.out)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if written is None:
        print(f"error: no run with a benchmark headline under {', '.join(map(str, args.folders))}", file=sys.stderr)
        return 1
    return 0
