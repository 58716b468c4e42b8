"""leaderboard.png: each model's mean rank with its spread."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rpbench.leaderboard.board import Leaderboard


def plot(board: Leaderboard, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in board.rows if board.overall[r]["mean_rank"] is not None]
    fig, ax = plt.subplots(figsize=(6, 0.5 * len(shown) + 1.5))
    y = list(range(len(shown)))[::-1]
    means = [board.overall[r]["mean_rank"] for r in shown]
    spread = [
        [m - board.overall[r]["min"] for r, m in zip(shown, means)],
        [board.overall[r]["max"] - m for r, m in zip(shown, means)],
    ]
    ax.errorbar(means, y, xerr=spread, fmt="o", capsize=4)
    ax.set_yticks(y, shown)
    ax.set_xlabel("mean rank over benchmarks (bars: min-max; 1 = best)")
    ax.invert_xaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
