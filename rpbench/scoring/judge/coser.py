"""CoSER given-circumstance acting (Wang et al. 2025, Neph0s/CoSER): the judge's flaw verdicts and their scores.

The judge reads the original scene and the simulated one and lists, for one dimension per request, the flaws it
finds, each with a severity (1 minor .. 5 severe; the authors' criteria allow up to 10 for repetition). A verdict
is the JSON object ``{"<dimension>": {"flaws": [{"instance", "type", "severity"}, ...]}}``; a flaw without a
severity (missing or null) counts 1, as in the authors' code. A reply that is not such an object, or a severity
that is not a whole number, is unreadable: re-asked, then counted as a parse failure, never scored (the authors'
code skips a non-integer severity silently).

Length correction (the authors' rule): longer simulations give the judge more to find fault with, so each
character message (every message of the scene but the environment's) takes 0.3 off the flaw total before it is
scaled: ``score = clip(100 - 5 * (sum(severities) - 0.3 * character_messages), 0, 100)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.scoring.judge.parse import outermost_object

DIMENSIONS: tuple[str, ...] = ("Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality")
PER_MESSAGE_ALLOWANCE = 0.3  # flaw severity forgiven per character message (the authors' length correction)
POINTS_PER_SEVERITY = 5
MISSING_SEVERITY = 1
NEXT_SPEAKER = re.compile(r"next\s+speaker\W*?(?:[:\-]|\bis\b)\s*([^\n]+)", re.IGNORECASE)


def parse_flaws(text: str, dimension: str) -> list[int] | None:
    """The severities of the flaws the judge listed for ``dimension`` (the outermost ``{...}`` of its reply), or
    None when the reply is not a verdict for it (see the module docstring)."""
    found = outermost_object(text)
    entry = found.get(dimension) if found is not None else None
    flaws = entry.get("flaws") if isinstance(entry, dict) else None
    if not isinstance(flaws, list) or not all(isinstance(f, dict) for f in flaws):
        return None
    severities = [MISSING_SEVERITY if f.get("severity") is None else f["severity"] for f in flaws]
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in severities):
        return None
    return severities


def parse_next_speaker(text: str) -> str:
    """The name the next-speaker step gave: what follows ``Next Speaker`` (``:``, ``-`` or ``is``; markdown
    emphasis ignored) on the last line that has it, else the whole reply, trimmed."""
    found = NEXT_SPEAKER.findall(text)
    name = found[-1] if found else text
    return name.replace("*", "").strip().rstrip(".,!\"'").strip()


def dimension_score(severities: Sequence[int], character_messages: int) -> float:
    """A dimension's score from 0 to 100: the flaw total less the length allowance, scaled and clipped."""
    penalty = sum(severities) - PER_MESSAGE_ALLOWANCE * character_messages
    return max(0.0, min(100.0, 100.0 - POINTS_PER_SEVERITY * penalty))


def session_average(scores: Mapping[str, float | None]) -> float | None:
    """A scene's average over the four dimensions; None when any is unscored."""
    values = [scores.get(d) for d in DIMENSIONS]
    return None if any(v is None for v in values) else sum(values) / len(values)


def dimension_means(scored: Sequence[Mapping[str, float | None]]) -> dict[str, Any]:
    """Each dimension's mean over the scenes it was scored on, and ``average``: the mean of those means (the
    authors' headline); None where a dimension has no score."""
    means: dict[str, Any] = {}
    for d in DIMENSIONS:
        values = [s[d] for s in scored if s.get(d) is not None]
        means[d] = sum(values) / len(values) if values else None
    present = [means[d] for d in DIMENSIONS]
    means["average"] = None if None in present else sum(present) / len(present)
    return means
