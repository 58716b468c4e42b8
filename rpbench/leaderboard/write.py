"""leaderboard.md, leaderboard.csv and leaderboard.png of a board, names escaped for markdown and csv."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from rpbench.leaderboard.board import ROWS, Leaderboard
from rpbench.leaderboard.plot import plot
from rpbench.leaderboard.runs import Cell, Provenance


def md(text: Any) -> str:
    """``text`` as one markdown table cell: ``|`` escaped, line breaks as spaces (a name cannot add a row)."""
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").splitlines())


def csv_safe(value: Any) -> Any:
    """A text value a spreadsheet would run as a formula (=, +, -, @, tab, CR first) quoted with a leading '."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def footnotes(board: Leaderboard) -> dict[Provenance, str]:
    """Each distinct provenance (judge, prompts, decoding) of the board's runs -> its footnote key (P1, P2, ...),
    numbered in the order of the runs listed under "What produced each cell"."""
    keys: dict[Provenance, str] = {}
    for _, members in sorted(board.members.items()):
        for run in members:
            if run.provenance is not None and run.provenance not in keys:
                keys[run.provenance] = f"P{len(keys) + 1}"
    return keys


def cell_text(cell: Cell | None, notes: dict[Provenance, str] | None = None) -> str:
    if cell is None:
        return "missing"
    if cell.conflict:
        return f"conflict ({cell.conflict.summary()}: see Conflicts)"
    text = f"{_number(cell.value)} [{_number(cell.ci_low)}, {_number(cell.ci_high)}]"
    if cell.seeds > 1:
        text += f" (median of {cell.seeds})"
    if cell.other_version:
        text += f" (rpbench {cell.identity.version})"
    text += f" ⚠ {cell.flag}" if cell.flag else ""
    return text + (f" [{notes[cell.provenance]}]" if notes and cell.provenance in notes else "")


def role_in_cell(run: Cell, cell: Cell) -> str:
    """What ``run`` is to the cell it belongs to: the run shown, a seed beside it, or one of a conflict's."""
    if cell.conflict:
        return "conflict: not combined"
    if run is cell:
        return f"shown (median of {cell.seeds})" if cell.seeds > 1 else "shown"
    return "seed"


def markdown(board: Leaderboard) -> str:
    notes = footnotes(board)
    lines = [
        "# Leaderboard",
        "",
        f"Rows: {board.by} ({ROWS[board.by]}; `--by` chooses: {', '.join(ROWS)}).",
        "",
        "Each benchmark's headline with its 95% CI; rank 1 is best. Flagged cells (judge, data or headline unlike",
        "their column's; short runs) and conflicts are not ranked; a missing cell is missing, never 0. A cell",
        "written by another rpbench version than most of its column names it. [Pn]: the cell's judge, prompts and",
        "decoding (Provenance, below); cells of one column with another judge, prompt or decoding are not ranked",
        "together.",
        "",
        f"| row: {board.by} | mean rank (min-max, benchmarks) | " + " | ".join(map(md, board.benchmarks)) + " |",
        "| --- | --- |" + " --- |" * len(board.benchmarks),
    ]
    for row in board.rows:
        o = board.overall[row]
        overall = (
            "–" if o["mean_rank"] is None else f"{o['mean_rank']:.2f} ({o['min']:g}-{o['max']:g}, {o['benchmarks']})"
        )
        cells = [md(cell_text(board.cells.get((row, b)), notes)) for b in board.benchmarks]
        lines.append(f"| {md(row)} | {overall} | " + " | ".join(cells) + " |")
    conflicts = [(key, c.conflict) for key, c in sorted(board.cells.items()) if c.conflict]
    if conflicts:
        lines += ["", "## Conflicts", ""]
        lines += [f"- {md(row)}, {md(benchmark)}: {md(why)}" for (row, benchmark), why in conflicts]
    lines += ["", "## Adjacent rows (paired bootstrap on shared records; delta = lower - upper)", ""]
    lines += [
        "| upper | lower | benchmark | shared | delta | 95% CI | p |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in board.adjacent:
        ci = f"[{_number(t.get('ci_low'))}, {_number(t.get('ci_high'))}]"
        p = "–" if t.get("p_value") is None else f"{t['p_value']:.4f}"
        delta = _number(t.get("delta"))
        names = " | ".join(md(t[k]) for k in ("upper", "lower", "benchmark"))
        lines.append(f"| {names} | {t['shared_units']} | {delta} | {ci} | {p} |")
    lines += [
        "",
        "## What produced each cell",
        "",
        "| row | benchmark | run | in the cell | headline | judge | test data sha256 | rpbench | provenance |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, members in sorted(board.members.items()):
        for run in members:
            i = run.identity
            shown = (*key, run.run, role_in_cell(run, board.cells[key]), i.headline, i.judge, i.data[:16], i.version)
            note = notes.get(run.provenance, "–") if run.provenance is not None else "–"
            lines.append("| " + " | ".join(map(md, (*shown, note))) + " |")
    if notes:
        lines += [
            "",
            "## Provenance",
            "",
            "What each [Pn] stands for: the judge (backend:model, its endpoint and snapshot where recorded),",
            "each prompt's sha256 (12 characters, as metrics.json records them) and the evaluated model's decoding.",
            "",
            "| key | judge | prompts sha256 | decoding |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| {key} | {md(p.judge)} | {md(p.prompts)} | {md(p.decoding)} |" for p, key in notes.items()]
    if board.short:
        lines += ["", f"## Short runs left out ({len(board.short)}; --with-short shows them, unranked)", ""]
        lines += ["| run | short because |", "| --- | --- |"]
        lines += [f"| {md(run)} | {md(why)} |" for run, why in board.short]
    if board.skipped:
        lines += ["", f"## Runs without a cell ({len(board.skipped)})", "", "| run | why |", "| --- | --- |"]
        lines += [f"| {md(run)} | {md(why)} |" for run, why in board.skipped]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = [
    "row", "benchmark", "headline", "value", "ci_low", "ci_high", "rank", "mean_rank", "seeds", "judge",
    "prompts_sha256", "prompts", "decoding_sha256", "decoding",
    "data_sha256", "rpbench_version", "flag", "conflict", "judge_requests", "judge_tokens", "judge_cost_usd", "runs",
]  # fmt: skip


def csv_rows(board: Leaderboard) -> list[dict[str, Any]]:
    out = []
    for row in board.rows:
        for benchmark in board.benchmarks:
            c = board.cells.get((row, benchmark))
            base = {"row": row, "benchmark": benchmark, "mean_rank": board.overall[row]["mean_rank"]}
            if c is None:
                out.append({**base, "flag": "missing"})
                continue
            i = c.identity
            out.append(
                {
                    **base,
                    **{"headline": i.headline, "value": c.value, "ci_low": c.ci_low, "ci_high": c.ci_high},
                    **{"rank": board.rank.get((row, benchmark)), "seeds": c.seeds, "judge": i.judge},
                    **{
                        "prompts_sha256": i.prompts,
                        "prompts": c.provenance and c.provenance.prompts,
                        "decoding_sha256": i.decoding,
                        "decoding": c.provenance and c.provenance.decoding,
                        "data_sha256": i.data,
                        "rpbench_version": i.version,
                        "flag": c.flag,
                        "conflict": c.conflict and str(c.conflict),
                    },
                    **{f"judge_{k}": v for k, v in c.judge_cost.items()},
                    "runs": c.run,
                }
            )
    return out


def write(board: Leaderboard, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "leaderboard.md").write_text(markdown(board), encoding="utf-8")
    with open(out_dir / "leaderboard.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in csv_rows(board))
    plot(board, out_dir / "leaderboard.png")
    return out_dir / "leaderboard.md"
