"""Strict parsers for judge replies. Anything not clearly in the expected form is None (a parse failure),
never a guessed or zero score."""

from __future__ import annotations

import math
import re

_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
# Optional label before the digit ("Score:", "Verdict -") and decoration around it (**1**, "1", 1.).
_VERDICT = re.compile(r"^(?:(?:score|verdict|answer)\s*[:\-]?\s*)?[\*\"'`]*([01])[\*\"'`]*\.?$", re.IGNORECASE)
_SCORES_MARK = "[Scores]:"
# "(a, b)" right after the marker; each number may carry a label ("Model A: 7").
_PAIR = re.compile(rf"^\s*\(\s*(?:[^,():]*:\s*)?{_NUMBER}\s*,\s*(?:[^,():]*:\s*)?{_NUMBER}\s*\)")


def parse_verdict(text: str) -> int | None:
    """A binary verdict: the reply must be exactly 0 or 1 (optionally labelled / decorated)."""
    match = _VERDICT.match(text.strip())
    return int(match.group(1)) if match else None


def parse_score_pair(text: str, low: float = 1.0, high: float = 10.0) -> tuple[float, float] | None:
    """``(a, b)`` from a review ending in ``..., [Scores]: (a, b)``.

    The marker must occur exactly once and both scores must lie in [low, high]; otherwise None.
    """
    if text.count(_SCORES_MARK) != 1:
        return None
    match = _PAIR.match(text.split(_SCORES_MARK, 1)[1])
    if match is None:
        return None
    a, b = float(match.group(1)), float(match.group(2))
    if not all(math.isfinite(x) and low <= x <= high for x in (a, b)):
        return None
    return a, b
