"""RPGBench: reference metrics per subset tag and per distribution shift; no judge."""

from __future__ import annotations

from collections.abc import Sequence

from rpbench.data.records import EvalExample
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark


class RPGBench(Benchmark):
    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        """Task label, and the shift each subset tag belongs to (in distribution, user, character, ...)."""
        return {**super().groupings(examples), "shift": [e.meta["shift"] for e in examples]}


BENCHMARKS.register("rpgbench")(RPGBench())
