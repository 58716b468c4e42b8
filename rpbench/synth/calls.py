"""Generator calls of a stage: batched, concurrent up to ``judge.concurrency``, cached and retried by the judge
client (``rpbench.scoring.judge``), checked, re-asked with the reason of a rejection, counted.

Each task's reply goes through its ``check``: a value, or a named reason. A rejected reply is sent back with
the reason (so the retry is a new request, not a cache hit), up to ``tries``; a task still rejected is
written to the stage's rejected file with every reason. A request that got no reply after the client's
retries is not written: a re-run asks it again. Progress (with ETA) is one bar per stage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rpbench.core.errors import RpbenchError
from rpbench.core.progress_bar import progress_bar
from rpbench.scoring.chat import ChatClient, ChatRequest, RequestStats
from rpbench.scoring.chat.client import reasked
from rpbench.scoring.judge.budget import CHARS_PER_TOKEN, JudgeEstimate
from rpbench.synth.stagefile import StageFile

log = logging.getLogger(__name__)
# The tokens a chat template adds around one message, at most (role markers, separators): for the worst case.
TEMPLATE_TOKENS_PER_MESSAGE = 16

USAGE_KEYS = ("requests", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens", "cost_usd")


class BudgetReached(RpbenchError):
    """The next request could pass ``synth.budget_usd``: the run stops before it; a re-run resumes."""


class NothingAccepted(RpbenchError):
    """Every reply of a stage was rejected: the generator cannot follow the format."""


def _message_text(request: ChatRequest) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]) for m in request.messages]


def worst_case_usd(client: ChatClient, request: ChatRequest) -> float:
    """The most ``request`` can cost: a token per byte of its messages (byte-level BPE never needs more) plus
    the template's tokens, and its whole ``max_tokens`` of reply."""
    texts = _message_text(request)
    prompt = sum(len(t.encode("utf-8")) for t in texts) + TEMPLATE_TOKENS_PER_MESSAGE * len(texts)
    return (prompt * client.config.price_input_per_1m + request.max_tokens * client.config.price_output_per_1m) / 1e6


def typical_estimate(client: ChatClient, requests: Sequence[ChatRequest]) -> JudgeEstimate:
    """The requests' cost by the judge's rule (``CHARS_PER_TOKEN`` characters a token, the whole reply length)."""
    prompt = sum(-(-sum(len(t) for t in _message_text(r)) // CHARS_PER_TOKEN) for r in requests)
    completion = sum(r.max_tokens for r in requests)
    cost = (prompt * client.config.price_input_per_1m + completion * client.config.price_output_per_1m) / 1e6
    return JudgeEstimate(len(requests), prompt, completion, cost)


@dataclass
class Spending:
    """What the generator may still spend: ``limit_usd`` (None: no limit) less what was spent before this
    stage and in it."""

    limit_usd: float | None
    spent_before_usd: float
    client: ChatClient
    start_cost_usd: float

    @property
    def spent_usd(self) -> float:
        return self.spent_before_usd + self.client.stats.cost_usd - self.start_cost_usd

    def affordable(self, requests: Sequence[ChatRequest]) -> int:
        """How many of ``requests``, in order, may be sent together without the budget being passed."""
        if self.limit_usd is None:
            return len(requests)
        room = self.limit_usd - self.spent_usd
        for n, request in enumerate(requests):
            room -= worst_case_usd(self.client, request)
            if room < 0:
                return n
        return len(requests)


@dataclass(frozen=True)
class Checked:
    """A reply's value after checking, or why it was rejected (``reason``: a short name, then details)."""

    value: Any = None
    reason: str | None = None


@dataclass(frozen=True)
class Task:
    id: str
    request: ChatRequest
    check: Callable[[str], Checked]
    # What the written record keeps besides the outcome (the inputs the task was built from).
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class StageTally:
    """What a stage did in this run: items written, rejected (by reason), failed requests (the first one's
    error), usage, seconds."""

    planned: int = 0
    already_done: int = 0
    accepted: int = 0
    rejected: int = 0
    failed: int = 0
    first_error: str | None = None
    reasons: Counter = field(default_factory=Counter)
    usage: dict[str, float] = field(default_factory=dict)
    estimate: dict[str, Any] = field(default_factory=dict)  # the pending items' typical cost, before asking
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "already_done": self.already_done,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "failed_requests": self.failed,
            "first_error": self.first_error,
            "rejection_reasons": dict(sorted(self.reasons.items())),  # every rejected reply, retried or dropped
            **self.usage,
            "estimate": self.estimate,
            "seconds": round(self.seconds, 3),
        }


def usage_between(before: RequestStats, after: RequestStats) -> dict[str, float]:
    return {k: round(getattr(after, k) - getattr(before, k), 6) for k in USAGE_KEYS}


def reason_name(reason: str) -> str:
    """The counted name of a rejection reason (its part before the first colon)."""
    return reason.split(":", 1)[0]


def run_tasks(
    client: ChatClient,
    stage: str,
    tasks: Sequence[Task],
    accepted: StageFile,
    rejected: StageFile,
    *,
    tries: int,
    batch_size: int,
    budget_usd: float | None,
    spent_before_usd: float = 0.0,
    reask: str,
    progress: bool = True,
) -> StageTally:
    """Ask every task not yet in ``accepted`` or ``rejected``; write each outcome as its batch completes."""
    started, before = time.monotonic(), replace(client.stats)
    tally = StageTally(planned=len(tasks))
    pending = [t for t in tasks if t.id not in accepted.done and t.id not in rejected.done]
    tally.already_done = len(tasks) - len(pending)
    spending = Spending(budget_usd, spent_before_usd, client, client.stats.cost_usd)
    tally.estimate = typical_estimate(client, [t.request for t in pending]).as_dict()
    _log_estimate(stage, tally.estimate, spending)
    bar = progress_bar(desc=stage, total=len(tasks), unit="item", initial=tally.already_done, disable=not progress)
    try:
        for start in range(0, len(pending), batch_size):
            batch = pending[start : start + batch_size]
            outcomes = _ask_checked(client, stage, batch, tries, reask, spending)
            good, bad, unasked = [], [], 0
            for task, (value, reasons, error) in zip(batch, outcomes):
                tally.reasons.update(reason_name(r) for r in reasons)
                if error == OVER_BUDGET:
                    unasked += 1
                elif error is not None:
                    tally.failed += 1
                    tally.first_error = tally.first_error or error
                elif value is not None:
                    good.append({"id": task.id, **task.meta, **value})
                else:
                    bad.append({"id": task.id, **task.meta, "reasons": reasons})
            accepted.append(good)
            rejected.append(bad)
            tally.accepted += len(good)
            tally.rejected += len(bad)
            bar.update(len(batch) - unasked)
            if unasked:
                raise BudgetReached(
                    f"synth.budget_usd={budget_usd}: {spending.spent_usd:.4f} USD spent; the next request could "
                    f"cost more than is left, so stage {stage} stopped after "
                    f"{tally.already_done + tally.accepted + tally.rejected}/{len(tasks)} items; rerun with a larger "
                    "budget to continue from there"
                )
    finally:
        bar.close()
        tally.usage = usage_between(before, client.stats)
        tally.seconds = time.monotonic() - started
    return tally


def _log_estimate(stage: str, found: Mapping[str, Any], spending: Spending) -> None:
    log.info(
        "synthesis: stage %s: %d requests estimated (first tries), %d tokens, %.4f USD",
        stage,
        found["requests"],
        found["tokens"],
        found["cost_usd"],
    )
    if spending.limit_usd is not None and found["cost_usd"] > spending.limit_usd - spending.spent_usd:
        log.warning(
            "synthesis: stage %s is estimated at %.4f USD, more than the %.4f USD left of synth.budget_usd=%s: it "
            "will stop at the budget (a rerun with a larger budget continues)",
            stage,
            found["cost_usd"],
            spending.limit_usd - spending.spent_usd,
            spending.limit_usd,
        )


OVER_BUDGET = "not asked: over synth.budget_usd"


def _ask_checked(
    client: ChatClient, stage: str, tasks: Sequence[Task], tries: int, reask: str, spending: Spending
) -> list[tuple[dict[str, Any] | None, list[str], str | None]]:
    """(value, rejection reasons, request error) per task, after up to ``tries`` checked attempts; a task
    whose next request the budget cannot cover ends with the error ``OVER_BUDGET`` (not written)."""
    requests = [t.request for t in tasks]
    reasons: list[list[str]] = [[] for _ in tasks]
    out: list[tuple[dict[str, Any] | None, list[str], str | None]] = [(None, [], None)] * len(tasks)
    pending = list(range(len(tasks)))
    for _ in range(tries):
        affordable = spending.affordable([requests[i] for i in pending])
        for i in pending[affordable:]:
            out[i] = (None, reasons[i], OVER_BUDGET)
        pending = pending[:affordable]
        if not pending:
            break
        results = asyncio.run(client.ajudge_many([requests[i] for i in pending], desc=stage))
        retry = []
        for i, result in zip(pending, results):
            if result.error is not None:
                out[i] = (None, reasons[i], result.error)
                continue
            checked = tasks[i].check(result.text or "")
            if checked.reason is None:
                out[i] = (checked.value, reasons[i], None)
                continue
            reasons[i].append(checked.reason)
            out[i] = (None, reasons[i], None)
            requests[i] = reasked(requests[i], result.text or "", reask.format(reason=checked.reason))
            retry.append(i)
        pending = retry
        if not pending:
            break
    return out
