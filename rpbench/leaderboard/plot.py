"""leaderboard.png: each benchmark's headline per row with its 95% CI, one panel per benchmark, rows in the
leaderboard's order (best mean rank on top)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

if TYPE_CHECKING:
    from rpbench.leaderboard.board import Leaderboard
    from rpbench.leaderboard.runs import Cell

LABEL_CHARS = 36  # a row name is wrapped to lines of at most this many characters
CHAR_INCHES, LINE_INCHES = 0.075, 0.2  # a 9-point character's width; a line's height
PANEL_INCHES, MIN_SIZE_INCHES, DPI = 3.4, (7.0, 3.0), 120


def wrapped(name: str, width: int = LABEL_CHARS) -> str:
    """``name`` on lines of at most ``width`` characters, broken after spaces and slashes (inside a longer
    piece where it has neither)."""
    lines = [""]
    for piece in re.findall(r"[^ /]+[ /]?|[ /]", name):
        while len(piece) > width:
            lines += [piece[:width]]
            piece = piece[width:]
        if lines[-1] and len(lines[-1].rstrip()) + len(piece.rstrip()) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(line.rstrip() for line in lines if line.strip())


def column_headline(cells: list[Cell]) -> str:
    """The headline most of a column's cells show (the one its axis is drawn in); conflicts count only in a
    column of nothing else."""
    counts = Counter(c.identity.headline for c in cells if c.conflict is None) or Counter(
        c.identity.headline for c in cells
    )
    return min(counts, key=lambda h: (-counts[h], h))


def plot(board: Leaderboard, path: Path) -> None:
    figure(board).savefig(path, dpi=DPI)


def figure(board: Leaderboard) -> Figure:
    """Dots at the headline with 95% CI bars (bound to bound): filled where ranked, hollow grey where not
    (flagged or short); ``missing``, ``conflict`` or another headline written where a cell has no dot."""
    labels = [wrapped(row) for row in board.rows]
    heights = [label.count("\n") + 1.5 for label in labels]  # each row's share of the height, in lines
    ys = [sum(heights[:k]) + heights[k] / 2 for k in range(len(labels))]
    label_inches = CHAR_INCHES * max(len(line) for label in labels for line in label.splitlines()) + 0.4
    size = (
        max(MIN_SIZE_INCHES[0], label_inches + PANEL_INCHES * len(board.benchmarks)),
        max(MIN_SIZE_INCHES[1], LINE_INCHES * sum(heights) + 1.6),
    )
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(1, len(board.benchmarks), sharey=True, squeeze=False)
    for ax, benchmark in zip(axes[0], board.benchmarks):
        column = [c for (_, b), c in board.cells.items() if b == benchmark]
        headline = column_headline(column)
        dots = 0
        for row, y in zip(board.rows, ys):
            cell = board.cells.get((row, benchmark))
            note = _note(cell, headline)
            if note:
                ax.text(0.02, y, note, transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="grey")
                continue
            ranked = (row, benchmark) in board.rank
            colour = "C0" if ranked else "grey"
            if cell.ci_low is not None:  # drawn from bound to bound: a bootstrap's CI need not hold the headline
                ax.plot([cell.ci_low, cell.ci_high], [y, y], color=colour, marker="|", markersize=8)
            ax.plot(cell.value, y, "o", color=colour, mfc=colour if ranked else "white")
            dots += 1
            ax.annotate(
                f"{cell.value:.3g}", (cell.value, y), xytext=(0, 5), textcoords="offset points", ha="center", fontsize=7
            )
        better = "higher" if column[0].higher_is_better else "lower"
        ax.set_xlabel(f"{headline} (95% CI; {better} is better)")
        ax.set_title(benchmark)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.15)
        if not dots:  # an axis without a dot has no scale to show
            ax.set_xticks([])
    axes[0][0].set_yticks(ys, labels, fontsize=9)
    axes[0][0].set_ylim(sum(heights), 0)  # the best row on top
    fig.suptitle(f"Leaderboard, rows by {board.by}: headline with 95% CI (best mean rank on top)", fontsize=10)
    fig.legend(
        handles=[
            Line2D([], [], marker="o", color="C0", linestyle="", label="ranked"),
            Line2D([], [], marker="o", color="grey", mfc="white", linestyle="", label="not ranked (flagged or short)"),
        ],
        loc="outside lower center",
        ncols=2,
        fontsize=8,
    )
    return fig


def _note(cell: Cell | None, headline: str) -> str | None:
    """What stands in a cell's place when it has no dot on its column's axis."""
    if cell is None:
        return "missing"
    if cell.conflict:
        return "conflict (see leaderboard.md)"
    if cell.identity.headline != headline:
        return f"{cell.identity.headline}: not on this axis"
    return None
