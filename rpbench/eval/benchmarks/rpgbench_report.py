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
    """Theorem 3.4's bound and the empirical (R-)EMID against the number of samples, one colour per category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (shift, points) in enumerate(convergence["points"].items()):
        ns = sorted({p["n"] for p in points})
        ax.plot(ns, [_mean_at(points, "bound", n) for n in ns], f"C{k}-", label=f"{shift} bound")
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
        out.append(generalization_section(results))
    return out


def generalization_section(results: Mapping[str, Any]) -> str:
    """The R-EMID tables: per category (the paper's estimates), then the roll-up per shift type."""
    g = results["generalization"]
    has_r = "r_emid" in results
    embedder = g["embedder"]
    lines = [
        "### Generalization (R-EMID paper), per category\n",
        f"Critic: {g['critic']}; reasoning: {g['reasoning_source']}; embeddings: {embedder['encoder']} "
        f"hidden_states[{embedder['layer']}], {embedder['pooling']}, {embedder['max_length']} tokens"
        + (f" ({embedder['fallback_reason']})" if embedder.get("fallback_reason") else "")
        + f"; JS weighting {g['settings']['weighting']}; samples per category {g['n_per_category']}; "
        f"empty predictions left out {g['excluded_empty_predictions'] or 'none'}; texts cut at the encoder's "
        f"length {g['n_truncated_texts']}.\n",
        f"*bound*: {g['bound_form']}. *EMID-code bound*: {g['bound_emid_code_form']}.\n",
    ]
    if g["critic_is_evaluated_model"]:
        lines.append("**The critic is the evaluated model: these EMI values are not comparable across models.**\n")
    lines += [
        "| category | JS user | JS character | JS dialogue | δ_P | δ_Q | EMID | R-EMID | bound | Ĥ | EMID-code bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c, j in results["jsd"].items():
        b = results["bound"][c]
        lines.append(
            f"| {c} | {_f(j['user'])} | {_f(j['character'])} | {_f(j['dialogue'])} | {_f(j['delta_p'])} | "
            f"{_f(j['delta_q'])} | {_f(results['emid'][c])} | {_f(results['r_emid'][c]) if has_r else '–'} | "
            f"{_f(b['value'])} | {_f(b['entropy'])} | {_f(results['bound_emid_code'][c])} |"
        )
    lines += ["", "| category | n | EMI | R-EMI | ppl(golden) | ppl(golden given r) |", "|---|---|---|---|---|---|"]
    for c, e in results["emi"].items():
        p = results["perplexity"][c]
        r = _f(results["r_emi"][c]["emi"]) if has_r else "–"
        lines.append(
            f"| {c} | {e['n']} | {_f(e['emi'])} | {r} | {_f(p['without_reasoning'], '.2f')} | "
            f"{_f(p.get('with_reasoning'), '.2f')} |"
        )
    lines += [
        "",
        "Per shift type (mean over its categories):\n",
        "| shift | categories | n | R-EMI | R-EMID | bound | EMID-code bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for shift, r in results["by_shift"].items():
        lines.append(
            f"| {shift} | {', '.join(r['categories'])} | {r['n']} | {_f(r.get('r_emi', r.get('emi')))} | "
            f"{_f(r.get('r_emid', r.get('emid')))} | {_f(r.get('bound'))} | {_f(r.get('bound_emid_code'))} |"
        )
    lines.append("\nPlots: js_vs_winrate.png (when judged), bound_convergence.png.")
    return "\n".join(lines) + "\n"
