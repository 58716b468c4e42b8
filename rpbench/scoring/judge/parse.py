"""Strict parsers for judge replies. Anything not clearly in the expected form is None (a parse failure),
never a guessed or zero score."""

from __future__ import annotations

import json
import re
from typing import Any

from rpbench.data.mmrole.prompts import parse_score_pair  # noqa: F401  (defined with the MMRole-Eval prompt)

# Optional label before the digit ("Score:", "Verdict -") and decoration around it (**1**, "1", 1.).
_VERDICT = re.compile(r"^(?:(?:score|verdict|answer)\s*[:\-]?\s*)?[\*\"'`]*([01])[\*\"'`]*\.?$", re.IGNORECASE)


def parse_verdict(text: str) -> int | None:
    """A binary verdict: the reply must be exactly 0 or 1 (optionally labelled / decorated)."""
    match = _VERDICT.match(text.strip())
    return int(match.group(1)) if match else None


def outermost_object(text: str) -> dict[str, Any] | None:
    """The JSON object spanning the reply's first ``{`` to its last ``}``, or None when there is none or it does
    not parse as an object (the judges asked for one JSON object read it so)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        found = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    return found if isinstance(found, dict) else None
