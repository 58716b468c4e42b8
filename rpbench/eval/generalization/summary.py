"""Multi-model summary of ``evaluator=rpgbench`` runs: correlation of R-EMI with WinRate per (model,
split) (the score setting) and of R-EMID with the WinRate difference per (model, shift) (the drop
setting). Runs without reasoning give plain EMI / EMID, and the summary says which it used; mixing
the two is an error. A (run, split) without a WinRate (every judgement failed) is an error naming it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rpbench.eval.generalization.correlation import correlate, winrate_drop

ID_SHIFT = "in_distribution"


def read_eval(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "metrics.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no metrics.json (not a finished run folder)")
    ev = json.loads(path.read_text(encoding="utf-8")).get("eval", {})
    missing = [key for key in ("emi", "emid", "winrate") if key not in ev]
    if missing:
        raise ValueError(f"{path}: eval lacks {missing}; run it with evaluator=rpgbench and a judge")
    return ev


def _winrate(ev: dict[str, Any], split: str, run: str) -> float:
    value = ev["winrate"]["groups"].get(split, {}).get("winrate")
    if value is None:
        raise ValueError(f"{run}: no WinRate for {split!r} (no judge verdicts there)")
    return float(value)


def summarize_runs(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """Score and drop correlations over the runs in ``run_dirs`` (module docstring)."""
    evals = {str(Path(d)): read_eval(Path(d)) for d in run_dirs}
    with_r = {run: "r_emi" in ev for run, ev in evals.items()}
    if len(set(with_r.values())) > 1:
        raise ValueError(f"some runs have R-EMI and some only EMI: {with_r}")
    reasoning = all(with_r.values())
    emi_key, emid_key = ("r_emi", "r_emid") if reasoning else ("emi", "emid")
    score_metric, score_judge, drop_metric, drop_judge = {}, {}, {}, {}
    for run, ev in evals.items():
        for split, value in ev[emi_key].items():
            score_metric[run, split] = float(value["emi"])
            score_judge[run, split] = _winrate(ev, split, run)
        for shift, value in ev[emid_key].items():
            drop_metric[run, shift] = float(value)
            drop_judge[run, shift] = winrate_drop(_winrate(ev, ID_SHIFT, run), _winrate(ev, shift, run))
    return {
        "metric": "R-EMI / R-EMID" if reasoning else "EMI / EMID (no reasoning in these runs)",
        "runs": list(evals),
        "score": correlate(score_metric, score_judge).as_dict(),
        "drop": correlate(drop_metric, drop_judge).as_dict(),
    }
