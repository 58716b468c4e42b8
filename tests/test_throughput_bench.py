"""experiments/throughput/bench.py keeps running against the code it measures: every variant of both
frameworks trains one step (a smoke run: speed itself is only ever read from the script's figures)."""

from __future__ import annotations

import csv

import pytest


@pytest.mark.slow
def test_every_variant_of_both_frameworks_runs_and_is_written_to_the_csv(tmp_path, run_script):
    out = tmp_path / "bench.csv"
    result = run_script(
        "experiments/throughput/bench.py",
        *("--repeats", "1", "--steps", "1", "--warmup", "0", "--no-generation-figure", "--csv", str(out)),
        *("--max-len", "64", "--median", "32", "--pairs", "2", "--generations", "2", "--completion-len", "4"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "failed runs" not in result.stdout, result.stdout[-3000:]
    rows = list(csv.DictReader(out.open()))
    for objective in ("sft", "dpo", "grpo"):
        frameworks = {row["framework"] for row in rows if row["objective"] == objective}
        assert frameworks == {"rpbench", "trl"}, (objective, frameworks)
    assert all(float(row["tokens"]) > 0 and float(row["tokens_per_s"]) > 0 for row in rows)
