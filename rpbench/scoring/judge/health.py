"""A judge whose verdicts mostly cannot be parsed, or whose requests fail, measures nothing: say so in the log
and the report."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def parse_failure_warning(parse_failures: int, n: int, limit: float) -> str | None:
    """The warning (also logged) when more than ``limit`` of ``n`` judgements are parse failures."""
    if n == 0 or parse_failures / n <= limit:
        return None
    message = (
        f"the judge's replies could not be parsed for {parse_failures} of {n} judgements "
        f"({100 * parse_failures / n:.0f}%, above judge.warn_parse_failure_rate={limit:g}): its accuracies "
        "rest on the few parsed verdicts; check judge.model (a model too small to follow the rubric?) and "
        "judgements.jsonl"
    )
    log.warning(message)
    return message


def request_failure_warning(request_failures: int, n: int, limit: float) -> str | None:
    """The warning (also logged) when more than ``limit`` of ``n`` judge requests got no reply after every
    retry (their judgements are missing, not scored)."""
    if n == 0 or request_failures / n <= limit:
        return None
    message = (
        f"the judge answered no reply for {request_failures} of {n} judgements after every retry "
        f"({100 * request_failures / n:.0f}%, above judge.warn_request_failure_rate={limit:g}): those are left out "
        "of the accuracies; check judge.base_url, the endpoint's key and logs, and judgements.jsonl"
    )
    log.warning(message)
    return message
