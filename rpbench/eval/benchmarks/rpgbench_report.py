"""report.md sections and plots of the RPGBench evaluation (WinRate, JS, EMI, bound, perplexity)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

ID_SHIFT = "in_distribution"


def _f(value: Any, spec: str = ".4f") -> str:
    return "–" if value is None else format(value, spec)


def winrate_drops(results: Mapping[str, Any]) -> dict[str, float]:
    """shift -> WinRate(ID) - WinRate(shift), for shifts where both were judged."""
    groups = results.get("winrate", {}).get("groups", {})
    base = groups.get(ID_SHIFT, {}).get("winrate")
    if base is None:
        return {}
    return {s: base - g["winrate"] for s, g in groups.items() if s != ID_SHIFT and g["winrate"] is not None}


def js_severity(severity: Mapping[str, float]) -> float:
    """One severity number per shift: the sum of the three input JS terms."""
    return severity["user"] + severity["character"] + severity["dialogue"]


def plot_severity(results: Mapping[str, Any], path: Path) -> Path | None:
    """JS severity vs WinRate drop per shift (no plot without both)."""
    drops, jsd = winrate_drops(results), results.get("jsd", {})
    shifts = [s for s in jsd if s in drops]
    if not shifts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for s in shifts:
        ax.scatter(js_severity(jsd[s]), drops[s])
        ax.annotate(s, (js_severity(jsd[s]), drops[s]))
    ax.set_xlabel("JS severity (user + character + dialogue)")
    ax.set_ylabel("WinRate(ID) - WinRate(shift)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _mean_at(points, key: str, n: int) -> float:
    """Mean of ``key`` over the repeats at sample size ``n``."""
    values = [p[key] for p in points if p["n"] == n]
    return sum(values) / len(values)


def plot_convergence(convergence: Mapping[str, Any], path: Path) -> Path:
    """Bound (scale-adjusted, Ĥ = 1) and empirical (R-)EMID against the number of samples, one colour per shift."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (shift, points) in enumerate(convergence["points"].items()):
        ns = sorted({p["n"] for p in points})
        ax.plot(ns, [_mean_at(points, "bound", n) for n in ns], f"C{k}-", label=f"{shift} bound (Ĥ = 1)")
        ax.plot(
            ns, [_mean_at(points, "empirical", n) for n in ns], f"C{k}--", label=f"{shift} {convergence['empirical']}"
        )
    ax.set_xlabel("samples per split")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def report_sections(results: Mapping[str, Any]) -> list[str]:
    out = []
    if "winrate" in results:
        w = results["winrate"]
        lines = [
            "### WinRate vs golden responses (judge ensemble, position-swapped)\n",
            f"Judges: {', '.join(w['per_judge'])}; no verdict (parse or request failure, not counted as "
            f"losses): {w['overall']['no_verdict']} of {w['overall']['n']}.\n",
            "| shift | WinRate | judged | no verdict |",
            "|---|---|---|---|",
            f"| overall | {_f(w['overall']['winrate'])} | {w['overall']['judged']} | {w['overall']['no_verdict']} |",
        ]
        lines += [f"| {s} | {_f(g['winrate'])} | {g['judged']} | {g['no_verdict']} |" for s, g in w["groups"].items()]
        out.append("\n".join(lines) + "\n")
    if "jsd" in results:
        g = results["generalization"]
        has_r = "r_emid" in results
        lines = [
            "### Generalization (R-EMID paper)\n",
            f"Critic: {g['critic']}; reasoning: {g['reasoning_source']}; embeddings: {g['embedder']['encoder']} "
            f"layer {g['embedder']['layer']}; JS weighting {g['settings']['weighting']}; samples per split "
            f"{g['n_per_split']}.\n",
            f"Bound forms: *bound (Ĥ = 1)* is {g['bound_form']} (what the EMID code reports); "
            f"*bound (Ĥ estimated)* is {g['bound_estimated_form']}; Ĥ = max over the ID and shifted prompts "
            "of H(model | x) + H(golden | x), Monte-Carlo, nats per token.\n",
            "| shift | JS user | JS character | JS dialogue | δ_P | δ_Q | EMID | R-EMID | bound (Ĥ = 1) "
            "| bound (Ĥ estimated) | Ĥ |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        estimated = results.get("bound_estimated", {})
        for s, j in results["jsd"].items():
            r = _f(results["r_emid"][s]) if has_r else "–"
            e = estimated.get(s, {})
            lines.append(
                f"| {s} | {_f(j['user'])} | {_f(j['character'])} | {_f(j['dialogue'])} | {_f(j['delta_p'])} | "
                f"{_f(j['delta_q'])} | {_f(results['emid'][s])} | {r} | {_f(results['bound'][s]['value'])} | "
                f"{_f(e.get('value'))} | {_f(e.get('entropy'))} |"
            )
        lines += ["", "| split | EMI | R-EMI | ppl(golden) | ppl(golden given r) |", "|---|---|---|---|---|"]
        for s, e in results["emi"].items():
            p = results["perplexity"][s]
            r = _f(results["r_emi"][s]["emi"]) if has_r else "–"
            lines.append(
                f"| {s} | {_f(e['emi'])} | {r} | {_f(p['without_reasoning'], '.2f')} | "
                f"{_f(p.get('with_reasoning'), '.2f')} |"
            )
        lines.append("\nPlots: js_vs_winrate.png (when judged), bound_convergence.png (the Ĥ = 1 bound).")
        out.append("\n".join(lines) + "\n")
    return out
