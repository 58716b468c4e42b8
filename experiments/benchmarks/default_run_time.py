"""Wall time of the default run (`python run.py`) per phase, over a few runs; prints one line per run and the median.

python experiments/benchmarks/default_run_time.py [--runs 3] [override ...]

Each run is a fresh process writing to a temporary folder. Its phases come from the run's own log: the closing
`wall time: data ..., model ..., training ..., evaluation ..., report ...` line (rpbench.core.stopwatch), whose
timestamp, less those phases, marks when the pipeline started; `startup` is the time from launch to then
(imports, Hydra, validation) and `exit` the time from that line to the process's end. Each line also shows the
load average before and after (timings on shared cores are worth little without it), how torch's threads
waited (rpbench.cli.commands.wait_passively_when_busy: passively from a load of 1) and the run's numbers
(held-out loss, ROUGE-L) from its metrics.json, which no speed-up may change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from rpbench.cli.commands import BUSY_LOAD
from rpbench.core.stopwatch import PREFIX

REPO = Path(__file__).resolve().parents[2]
TIME_LINE = re.compile(r"^\[(?P<stamp>[\d-]+ [\d:]+,\d+)\].*?" + re.escape(PREFIX) + r" (?P<phases>.*)$", re.M)
PHASE = re.compile(r"(\w+) ([\d.]+) s")


def phases_of(run_dir: Path, launched: float, ended: float) -> dict[str, float]:
    """Seconds per phase of one finished run: startup, the pipeline's own phases, exit and total."""
    log = (run_dir / "run.log").read_text()
    found = TIME_LINE.search(log)
    if found is None:
        raise SystemExit(f"{run_dir / 'run.log'}: no '{PREFIX}' line; did the run finish?")
    logged = datetime.strptime(found["stamp"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    pipeline = {name: float(seconds) for name, seconds in PHASE.findall(found["phases"])}
    startup = logged - sum(pipeline.values()) - launched
    return {"startup": startup, **pipeline, "exit": ended - logged, "total": ended - launched}


def numbers_of(run_dir: Path) -> str:
    """The run's held-out loss and ROUGE-L, where it has them."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    numbers = []
    if "held_out" in metrics.get("train", {}):
        held_out = metrics["train"]["held_out"]
        numbers.append(f"held-out loss {held_out['before']['loss']:.4f} -> {held_out['after']['loss']:.4f}")
    overall = metrics.get("eval", {}).get("metrics", {}).get("overall", {})
    if "rougeL" in overall:
        numbers.append(f"ROUGE-L {overall['rougeL']['mean']:.4f}")
    return ", ".join(numbers)


def line(times: dict[str, float]) -> str:
    return " | ".join(f"{name} {seconds:.1f} s" for name, seconds in times.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (default: none)")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="rpbench-bench-") as tmp:
        for k in range(1, args.runs + 1):
            run_dir = Path(tmp) / f"run-{k}"
            load_before = os.getloadavg()[0]
            launched = time.time()
            done = subprocess.run(
                [sys.executable, "run.py", f"hydra.run.dir={run_dir}", *args.overrides],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            ended = time.time()
            if done.returncode != 0:
                raise SystemExit(f"run {k} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            times = phases_of(run_dir, launched, ended)
            runs.append(times)
            waits = os.environ.get("OMP_WAIT_POLICY", "PASSIVE" if load_before >= BUSY_LOAD else "spin").lower()
            load = f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}, threads wait: {waits}"
            print(f"run {k}: {line(times)}  ({load}; {numbers_of(run_dir)})", flush=True)
    median = {name: statistics.median(times[name] for times in runs) for name in runs[0]}
    print(f"median of {len(runs)}: {line(median)}  ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
