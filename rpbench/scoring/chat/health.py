"""An endpoint whose requests mostly fail, or a judge whose verdicts mostly cannot be parsed, measures nothing:
say so in the log, metrics.json and the report; and a run whose headline rests on nothing fails.

Every endpoint role of an evaluation (``judge``, the user ``simulator``, endpoint ``generation``) gets one
``role_health`` entry (requests, failures, their rate, the threshold and the setting that holds it, and the
warning above it); ``rests_on_nothing`` names the roles that answered no request at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

# Per role: what its requests are, and where to look when they fail.
ROLES = {
    "judge": ("judge requests", "check judge.base_url, judge.model, the endpoint's key and logs, and judgements.jsonl"),
    "simulator": (
        "user simulator requests",
        "check the simulator's endpoint (its base_url and model, or the judge's), its logs, and the simulator_* "
        "files of the run folder",
    ),
    "generation": (
        "endpoint generation requests",
        "check evaluator.endpoint.base_url and model, and the server's logs",
    ),
}
# Endpoint generation needs every prediction: one request still failing after its retries stops the run
# (rpbench.eval.generate.generate_via_endpoint; a re-run asks only those again).
GENERATION_FAILURE_LIMIT = 0.0


def role_health(role: str, requests: int, failures: int, limit: float, setting: str | None) -> dict[str, Any]:
    """``{"requests", "failures", "rate", "threshold", "setting", "warning"}`` for one endpoint role; the
    warning (also logged) when more than ``limit`` of its ``requests`` failed."""
    what, check = ROLES[role]
    rate = failures / requests if requests else None
    warning = None
    if rate is not None and rate > limit:
        above = f"above {setting}={limit:g}" if setting else f"above {limit:g}"
        warning = (
            f"{role}: {failures} of {requests} {what} got no usable reply ({100 * rate:.0f}%, {above}): what rests "
            f"on them is left out, not scored; {check}"
        )
        log.warning(warning)
    return {
        "requests": requests,
        "failures": failures,
        "rate": rate,
        "threshold": limit,
        "setting": setting,
        "warning": warning,
    }


def rests_on_nothing(roles: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why the results rest on nothing (the roles that had requests and saw every one fail); else None."""
    dead = [
        f"{role} ({h['failures']} of {h['requests']})"
        for role, h in roles.items()
        if h["requests"] and h["failures"] == h["requests"]
    ]
    if not dead:
        return None
    return f"every request of {', '.join(dead)} failed"


def no_verdict(n: int, parse_failures: int, request_failures: int) -> str | None:
    """Why a judged result rests on nothing when none of its ``n`` judgements gave a verdict; else None."""
    if n == 0 or parse_failures + request_failures < n:
        return None
    return f"none of the {n} judgements gave a verdict ({parse_failures} unparseable, {request_failures} unanswered)"


def parse_failure_warning(parse_failures: int, n: int, limit: float) -> str | None:
    """The warning (also logged) when more than ``limit`` of ``n`` judgements are parse failures."""
    if n == 0 or parse_failures / n <= limit:
        return None
    message = (
        f"the judge's replies could not be parsed for {parse_failures} of {n} judgements "
        f"({100 * parse_failures / n:.0f}%, above judge.warn_parse_failure_rate={limit:g}): its scores rest "
        "on the few parsed verdicts; check judge.model (a model too small to follow the rubric's format?) and "
        "the judge's replies in the run folder (judgements.jsonl, or reviews/ for MMRole)"
    )
    log.warning(message)
    return message
