"""Wall time of a run's phases, for its closing log line (``experiments/benchmarks/default_run_time.py`` reads it)."""

from __future__ import annotations

import time

PREFIX = "wall time:"  # the log line starts so: `wall time: data 0.1 s, model 0.3 s, ...`


class Stopwatch:
    """Seconds per phase: ``lap(phase)`` ends the phase that ran since the previous lap (or the start)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = now - self._last
        self._last = now

    def line(self) -> str:
        return f"{PREFIX} " + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in self.seconds.items())
