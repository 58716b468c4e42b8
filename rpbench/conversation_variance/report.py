"""variance.md: the analysis of ``rpbench.conversation_variance.analysis`` as tables a reader can check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _ci(ci: list[float], digits: int = 4) -> str:
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def markdown(sweep: str, result: Mapping[str, Any]) -> str:
    d, b, n = result["design"], result["bootstrap"], result["sample_size"]
    factors = ", ".join(f"{f} {k}" for f, k in d["factors"].items())
    lines = [
        f"# Variance by source: {sweep}",
        "",
        f"Score: `{result['dimension']}` (1-5), mean {result['mean']:.4f} over {d['scores']} session scores; "
        f"levels: {factors}.",
    ]
    if d["one_level"]:
        lines.append(
            "One level only (not in the model, its variance not estimated: part of what every run shares): "
            + "; ".join(f"{s} `{v}`" for s, v in d["one_level"].items())
            + "."
        )
    if d["scenarios_dropped"]:
        lines.append(
            f"Left out (--drop-incomplete): {len(d['scenarios_dropped'])} scenarios without a score in every run: "
            + "; ".join(f"{s} ({why})" for s, why in d["scenarios_dropped"].items())
            + "."
        )
    confidence = f"{b['confidence']:.0%}"
    lines += [
        "",
        "Crossed random effects, one score per cell; components are ANOVA (expected mean squares) estimates, "
        "truncated at 0 (the untruncated estimate is shown). CIs: percentile bootstrap over scenarios "
        f"({b['n_resamples']} resamples, seed {b['seed']}; the seeds and judges are kept, so the CIs of their "
        "components reflect scenario sampling only).",
        "",
        f"## By source (total variance of one session score: {result['total_variance']:.4f})",
        "",
        f"| source | variance | {confidence} CI | share | {confidence} CI | terms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in result["sources"]:
        lines.append(
            f"| {s['source']} | {s['variance']:.4f} | {_ci(s['ci'])} | {s['share']:.1%} | "
            f"[{s['share_ci'][0]:.1%}, {s['share_ci'][1]:.1%}] | {', '.join(s['terms'])} |"
        )
    lines += [
        "",
        "## Components",
        "",
        f"| term | source | df | mean square | estimate | variance | {confidence} CI | share |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in result["terms"]:
        lines.append(
            f"| {t['term']} | {t['source']} | {t['df']} | {t['mean_square']:.4f} | {t['estimate']:.4f} | "
            f"{t['variance']:.4f} | {_ci(t['ci'])} | {t['share']:.1%} |"
        )
    lines += [
        "",
        f"## Sessions and judges for a {n['confidence']:.0%} CI of the mean score at most {n['ci_width']} wide",
        "",
        f"Each scenario run with {n['policy_seeds']} policy seed(s) and {n['simulator_seeds']} simulator seed(s), "
        "every session judged by each judge; var(mean) = sum of each component / the product of its factors' "
        f"counts; width = 2 x {n['z']:.3f} x sqrt(var(mean)). Fewest judges: "
        + (str(n["fewest_judges"]) if n["fewest_judges"] else "none up to the table's last row")
        + ".",
        "",
        "| judges | scenarios | sessions | narrowest width (any number of scenarios) |",
        "| --- | --- | --- | --- |",
    ]
    for r in n["by_judges"]:
        needed = ("not reachable", "-") if r["scenarios"] is None else (r["scenarios"], r["sessions"])
        lines.append(f"| {r['judges']} | {needed[0]} | {needed[1]} | {r['narrowest_width']:.4f} |")
    return "\n".join(lines) + "\n"
