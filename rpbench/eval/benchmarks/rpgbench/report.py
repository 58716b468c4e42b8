"""report.md sections and plots of the RPGBench evaluation (WinRate, JS, EMI, bound, perplexity)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from rpbench.eval.generalization.summary import ID_CATEGORY, js_severity

PLOT_DPI, PANEL_COLUMNS = 120, 4
EMPIRICAL_LABELS = {"r_emid": "R-EMID", "emid_critic_without_r": "EMID (critic without r)"}  # convergence's


def _f(value: Any, spec: str = ".4f") -> str:
    return "–" if value is None else format(value, spec)


def _drops(groups: Mapping[str, Mapping[str, Any]], base: str | None) -> dict[str, float]:
    """group -> WinRate(base) - WinRate(group), for the other groups where both have one."""
    rate = groups.get(base, {}).get("winrate")
    if rate is None:
        return {}
    return {g: rate - e["winrate"] for g, e in groups.items() if g != base and e["winrate"] is not None}


def winrate_drops(results: Mapping[str, Any]) -> dict[str, float]:
    """category -> ensemble WinRate(IDTest) - WinRate(category), for shifted categories where both have one."""
    return _drops(results.get("winrate", {}).get("by_category", {}), ID_CATEGORY)


def severity_points(results: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """category -> (JS severity, ensemble WinRate), for the categories with a JS entry and a WinRate."""
    jsd, by_category = results.get("jsd", {}), results.get("winrate", {}).get("by_category", {})
    return {
        c: (js_severity(jsd[c]), by_category[c]["winrate"])
        for c in jsd
        if by_category.get(c, {}).get("winrate") is not None
    }


def plot_severity(results: Mapping[str, Any], run_name: str, path: Path) -> Path | None:
    """``severity_figure`` written to ``path``; None (nothing written) without a category that has both."""
    if not severity_points(results):
        return None
    severity_figure(results, run_name).savefig(path, dpi=PLOT_DPI)
    return path


def severity_figure(results: Mapping[str, Any], run_name: str) -> Figure:
    """The paper's pilot figure: JS severity vs ensemble WinRate per shifted category, each point numbered and
    named (with its shift and the verdicts its WinRate rests on) in a key beside the plot (names written at the
    points overlap), with the IDTest WinRate as a dashed line."""
    points = severity_points(results)
    fig = Figure(figsize=(8, 4.8), layout="constrained")
    ax = fig.subplots()
    key = []
    for number, (category, (x, y)) in enumerate(sorted(points.items(), key=lambda p: p[1]), 1):
        ax.scatter(x, y, color="C0")
        ax.annotate(str(number), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        judged = results["winrate"]["by_category"][category]["judged"]
        key.append(f"{number:>2}  {category} ({results['winrate']['shift_of'][category]}, {judged} verdicts)")
    base = results["winrate"]["by_category"].get(ID_CATEGORY, {}).get("winrate")
    if base is not None:
        ax.axhline(base, color="grey", linestyle="--", label=f"{ID_CATEGORY} WinRate")
        ax.legend(fontsize=8, loc="best")
    ax.text(1.03, 1, "\n".join(key), transform=ax.transAxes, va="top", fontsize=8, family="monospace")
    ax.set_xlabel("JS severity (user + character + dialogue)")
    ax.set_ylabel("WinRate (judge ensemble mean)")
    fig.suptitle(f"{run_name}\nWinRate against shift severity, per shifted category", fontsize=10)
    return fig


def plot_convergence(convergence: Mapping[str, Any], run_name: str, path: Path) -> Path:
    """``convergence_figure`` written to ``path``."""
    convergence_figure(convergence, run_name).savefig(path, dpi=PLOT_DPI)
    return path


def convergence_figure(convergence: Mapping[str, Any], run_name: str) -> Figure:
    """Theorem 3.4's bound and the empirical (R-)EMID against the samples per split, one small panel per shifted
    category: the mean over the repeats with its min-max band, the bound on the left axis and the (R-)EMID, orders
    of magnitude smaller, on its own right axis (both shared across panels), ticks at the sizes drawn, one legend
    beside them."""
    categories = convergence["points"]
    empirical = EMPIRICAL_LABELS[convergence["empirical"]]
    columns = min(PANEL_COLUMNS, len(categories))
    rows = math.ceil(len(categories) / columns)
    fig = Figure(figsize=(2.9 * columns + 2.6, 2.1 * rows + 1.3), layout="constrained")
    axes = list(fig.subplots(rows, columns, sharex=True, sharey=True, squeeze=False).flat)
    twins = []
    for k, (ax, (category, points)) in enumerate(zip(axes, categories.items())):
        twin = ax.twinx()
        if twins:
            twin.sharey(twins[0])
        twins.append(twin)
        ns = sorted({p["n"] for p in points})
        for key, axis, label, colour, style in (
            ("bound", ax, "Theorem 3.4 bound (left axis)", "C0", "o-"),
            ("empirical", twin, f"{empirical} (right axis)", "C1", "s--"),
        ):
            at = [[p[key] for p in points if p["n"] == n] for n in ns]
            axis.plot(ns, [sum(v) / len(v) for v in at], style, color=colour, markersize=3, label=label)
            axis.fill_between(ns, [min(v) for v in at], [max(v) for v in at], color=colour, alpha=0.2)
        ax.tick_params(axis="y", labelcolor="C0", labelsize=8)
        twin.tick_params(axis="y", labelcolor="C1", labelsize=8)
        ax.set_zorder(twin.get_zorder() + 1)  # the bound's band over the (R-)EMID's, not hidden under it
        ax.patch.set_visible(False)
        last_column = k % columns == columns - 1  # the shared right axis is labelled there only
        twin.yaxis.set_tick_params(right=last_column, labelright=last_column)
        if last_column:
            twin.set_ylabel(empirical, color="C1", fontsize=9)
        ax.set_title(category, fontsize=9)
        ax.grid(alpha=0.3)
    sizes = sorted({p["n"] for points in categories.values() for p in points})
    axes[0].set_xticks(sizes, [str(n) for n in sizes])  # the sample sizes, not 2.2, 2.4, ...
    for k, ax in enumerate(axes):
        if k >= len(categories):
            ax.set_visible(False)
        elif k + columns >= len(categories):  # the lowest panel of its column: its x ticks are labelled
            ax.xaxis.set_tick_params(labelbottom=True)
    repeats = len({p["repeat"] for points in categories.values() for p in points})
    fig.suptitle(
        f"{run_name}\nbound and {empirical} per shifted category (mean over {repeats} repeats; band: min-max)",
        fontsize=10,
    )
    fig.supxlabel("samples per split (in-distribution and shifted)", fontsize=9)
    fig.supylabel("Theorem 3.4 bound", fontsize=9, color="C0")
    fig.legend(handles=[*axes[0].get_lines(), *twins[0].get_lines()], loc="outside right lower", fontsize=8)
    return fig


def _judge_cell(tally: Mapping[str, Any] | None) -> str:
    if tally is None:
        return "–"
    return f"{_f(tally['winrate'])} ({tally['judged']}/{tally['n']})"


def _winrate_table(w: Mapping[str, Any], level: str, label: str) -> list[str]:
    """One row per group of ``level`` (by_category / by_shift), in distribution first: the ensemble, its
    drop from the in-distribution group, counts, then each judge."""
    judges = w["judges"]
    base = ID_CATEGORY if level == "by_category" else w["shift_of"].get(ID_CATEGORY)
    groups = w[level]
    shift = w["shift_of"] if level == "by_category" else {g: g for g in groups}
    groups = {g: groups[g] for g in sorted(groups, key=lambda g: (g != base, shift[g], g))}
    drops = _drops(groups, base)
    lines = [
        f"| {label} | ensemble WinRate | drop from {base} | judges with a verdict | judged | no verdict | "
        "empty replies left out | " + " | ".join(f"{j} (judged/asked)" for j in judges) + " |",
        "|" + "---|" * (7 + len(judges)),
    ]
    for group, e in groups.items():
        cells = [_judge_cell(w["per_judge"][j][level].get(group)) for j in judges]
        name = f"{group} ({w['shift_of'][group]})" if level == "by_category" else group
        lines.append(
            f"| {name} | {_f(e['winrate'])} | {_f(drops.get(group))} | {e['n_judges']} | {e['judged']} | "
            f"{e['no_verdict']} | {e['excluded_empty_predictions']} | " + " | ".join(cells) + " |"
        )
    return lines


def _category_mean_lines(means: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per shift, the mean of its categories' ensemble WinRates (the R-EMI roll-ups' convention)."""
    lines = [
        "| shift | ensemble WinRate, mean of its categories (as the R-EMI roll-ups) | categories | without WinRate |",
        "|---|---|---|---|",
    ]
    for shift, m in means.items():
        lines.append(
            f"| {shift} | {_f(m['winrate'])} | {', '.join(m['categories'])} | "
            f"{', '.join(m['without_winrate']) or 'none'} |"
        )
    return lines


def winrate_section(w: Mapping[str, Any]) -> str:
    """WinRate per category and per shift: the ensemble (mean of the judges' WinRates) and each judge."""
    o = w["overall"]
    lines = [
        "### WinRate vs golden responses (judge ensemble, position-swapped)\n",
        f"Judges: {', '.join(w['judges'])}. Ensemble WinRate = the mean of the WinRates of the judges with a "
        "verdict in the group; each judge's WinRate = model wins / verdicts over both orders. No verdict "
        f"(parse or request failure, never counted as a loss): {o['no_verdict']} of {o['n']} judgements "
        f"({o['parse_failures']} parse, {o['request_failures']} request failures). Records with an empty reply "
        f"(an unclosed think block too), left out of WinRate as of the R-EMID analysis: "
        f"{o['excluded_empty_predictions']}.\n",
    ]
    lines += [
        f"Overall ensemble WinRate: {_f(o['winrate'])} ({o['n_judges']} judges with a verdict); per judge: "
        + ", ".join(f"{j} {_judge_cell(w['per_judge'][j]['overall'])}" for j in w["judges"])
        + ".\n",
        *_winrate_table(w, "by_category", "category (shift)"),
        "",
        *_winrate_table(w, "by_shift", "shift (its records pooled)"),
        "",
        *_category_mean_lines(w["by_shift_mean_of_categories"]),
        "\nPlot: js_vs_winrate.png (JS severity vs ensemble WinRate per category, when the analysis ran).",
    ]
    return "\n".join(lines) + "\n"


def report_sections(results: Mapping[str, Any]) -> list[str]:
    out = []
    if "winrate" in results:
        out.append(winrate_section(results["winrate"]))
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
    plain = "emi" in results
    lines.append(
        "*EMI / EMID (critic without r)*: the R-EMI critic prompted without r, off the distribution it was "
        "trained on; "
        + (
            f"*EMI / EMID*: the paper's naive EMI, from the plain critic ({g['plain_critic']})."
            if plain
            else "the paper's naive EMI needs a critic trained without r (evaluator.plain_critic)."
        )
        + "\n"
    )
    lines += [
        "| category | JS user | JS character | JS dialogue | δ_P | δ_Q | EMID (critic without r) | EMID | R-EMID | "
        "bound | Ĥ (max) | Ĥ mean | Ĥ quantile | EMID-code bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    h = results.get("entropy", {})
    for c, j in results["jsd"].items():
        b = results["bound"][c]
        lines.append(
            f"| {c} | {_f(j['user'])} | {_f(j['character'])} | {_f(j['dialogue'])} | {_f(j['delta_p'])} | "
            f"{_f(j['delta_q'])} | {_f(results['emid_critic_without_r'][c])} | "
            f"{_f(results['emid'][c]) if plain else '–'} | {_f(results['r_emid'][c]) if has_r else '–'} | "
            f"{_f(b['value'])} | {_f(b['entropy'])} | {_f(h.get('h_hat_mean', {}).get(c))} | "
            f"{_f(h.get('h_hat_quantile', {}).get(c))} | {_f(results['bound_emid_code'][c])} |"
        )
    if h:
        lines.append(f"\nĤ quantile: {h['quantile']} of the per-prompt H(P_θ(· | x)) + H(P(· | x)) sums.")
    lines += [
        "",
        "| category | n | empty replies left out | EMI (critic without r) | EMI | R-EMI | "
        "ppl(golden), critic without r | ppl(golden given r) | ppl(golden), plain critic |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c, e in results["emi_critic_without_r"].items():
        p = results["perplexity"][c]
        r = _f(results["r_emi"][c]["emi"]) if has_r else "–"
        naive = _f(results["emi"][c]["emi"]) if plain else "–"
        lines.append(
            f"| {c} | {e['n']} | {e['excluded_empty_predictions']} | {_f(e['emi'])} | {naive} | {r} | "
            f"{_f(p['critic_without_r'], '.2f')} | {_f(p.get('with_reasoning'), '.2f')} | "
            f"{_f(p.get('without_reasoning'), '.2f')} |"
        )
    lines += [
        "",
        "Per shift type (mean over its categories):\n",
        "| shift | categories | n | R-EMI | R-EMID | bound | EMID-code bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for shift, r in results["by_shift"].items():
        lines.append(
            f"| {shift} | {', '.join(r['categories'])} | {r['n']} | {_f(r.get('r_emi'))} | "
            f"{_f(r.get('r_emid'))} | {_f(r.get('bound'))} | {_f(r.get('bound_emid_code'))} |"
        )
    lines.append("\nPlots: js_vs_winrate.png (when judged), bound_convergence.png.")
    return "\n".join(lines) + "\n"
