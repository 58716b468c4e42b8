"""The default run's time: experiments/benchmarks/default_run_time.py reads each phase from the run's own log
line; torch's CPU threads wait passively when other jobs keep the cores busy (no timings asserted)."""

from __future__ import annotations

import os
import re

import pytest

from rpbench.cli.commands import wait_passively_when_busy

PHASES = ("startup", "data", "model", "training", "evaluation", "report", "exit", "total")


@pytest.mark.slow
def test_the_benchmark_prints_each_phase_and_the_run_s_numbers(run_script):
    result = run_script(
        "experiments/benchmarks/default_run_time.py",
        *("--runs", "1", "debug=short", "data.max_test_samples=2", "evaluator.generation.max_new_tokens=4"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_line, median_line = result.stdout.strip().splitlines()
    for line in (run_line, median_line):
        assert re.findall(r"(\w+) [\d.]+ s", line)[: len(PHASES)] == list(PHASES), line
    numbers = r"load [\d.]+ -> [\d.]+, threads wait: (spin|passive); held-out loss [\d.]+ -> [\d.]+, ROUGE-L [\d.]+\)$"
    assert re.search(numbers, run_line), run_line


@pytest.mark.parametrize(
    ("chosen", "load", "policy"), [(None, 3.0, "PASSIVE"), (None, 0.2, None), ("ACTIVE", 3.0, "ACTIVE")]
)
def test_torch_s_threads_wait_passively_when_other_jobs_keep_the_cores_busy(monkeypatch, chosen, load, policy):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # restored (unset) after the test
    if chosen:
        monkeypatch.setenv("OMP_WAIT_POLICY", chosen)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    wait_passively_when_busy()
    assert os.environ.get("OMP_WAIT_POLICY") == policy
