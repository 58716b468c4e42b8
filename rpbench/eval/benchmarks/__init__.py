"""Each benchmark's evaluation (groupings, judge protocol, report sections): one ``Benchmark`` registered
in ``base.BENCHMARKS`` under its evaluator name. Importing the package registers the built-in ones."""

from rpbench.eval.benchmarks import mmrole, rolebench, rolemrc, rpgbench  # noqa: F401  (each registers itself)
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, judged_benchmarks

__all__ = ["BENCHMARKS", "Benchmark", "judged_benchmarks"]
