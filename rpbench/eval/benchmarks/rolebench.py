"""RoleBench cross-evaluation (RoleMRC Table 4): reference metrics per task label; no judge."""

from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark

BENCHMARKS.register("rolebench")(Benchmark())
