"""RoleBench cross-evaluation (RoleMRC Table 4): reference metrics per task label; no judge."""

from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, rouge_l


class RoleBench(Benchmark):
    headlines = (rouge_l(),)  # RoleBench's paper ranks by ROUGE-L


BENCHMARKS.register("rolebench")(RoleBench())
