"""Each benchmark's evaluation (groupings, judge protocol, report sections): one ``Benchmark`` registered
in ``base.BENCHMARKS`` under its evaluator name. Importing the package imports (registers) every module in it."""

from rpbench.core.registry import import_modules
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, judged_benchmarks

import_modules(__name__, __path__)

__all__ = ["BENCHMARKS", "Benchmark", "judged_benchmarks"]
