"""How metric values and judge accuracies are printed in tables (the papers' conventions)."""

from __future__ import annotations

import math

SCALE_100 = {"bleu_smoothed"}  # sacrebleu's 0-100 scale; every other metric is 0-1, shown as the papers do


def fmt_metric(value: float | None, metric: str = "", signed: bool = False) -> str:
    """A metric value as RoleMRC prints it: 0-1 with four decimals (0-100 metrics with two)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    spec = ".2f" if metric in SCALE_100 else ".4f"
    return format(value, ("+" if signed else "") + spec)


def fmt_percent(value: float | None, signed: bool = False) -> str:
    """An accuracy in percent with two decimals (RoleMRC Table 9: 74.67%)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(100 * value, "+.2f" if signed else ".2f") + "%"
