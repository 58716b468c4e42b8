"""`python sweep.py`: a local multirun whose runs are gathered into summary.csv / summary.md."""

from __future__ import annotations

import csv

import pytest

from conftest import run_script
from rpbench.sweep import flatten
from test_run import FAST


def test_flatten_keeps_scalars_and_drops_lists():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": None}) == {"a/b": 1, "d": "x", "e": None}


@pytest.mark.slow
def test_sweep_runs_every_combination_and_writes_a_summary(tmp_path):
    result = run_script(
        "sweep.py",
        f"hydra.sweep.dir={tmp_path}",
        *FAST,
        "logger=none",
        "save_model=false",
        "data.max_train_samples=24",
        "seed=1,2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert sorted(row["overrides"].split("seed=")[1].split()[0] for row in rows) == ["1", "2"]
    assert all(float(row["train/held_out/after/loss"]) < float(row["train/held_out/before/loss"]) for row in rows)
    assert "train/held_out/after/loss" in (tmp_path / "summary.md").read_text()
