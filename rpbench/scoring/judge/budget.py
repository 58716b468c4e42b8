"""The judge's cost of a run, estimated before it starts, against ``judge.budget`` ({usd, tokens}).

Each judge request is counted at its record's text (prompt turns, reference, and a reply of the generation's
``max_new_tokens``) at ``CHARS_PER_TOKEN`` characters a token, plus the judge's ``max_tokens`` of reply; the
judge template's own words are not counted, so leave a margin. Prices are the judge config's per-1M prices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rpbench.core.errors import RpbenchError

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English BPE vocabularies
BUDGET_KEYS = ("usd", "tokens")


class JudgeBudgetError(RpbenchError, RuntimeError):
    """The estimated judge cost of the run is past ``judge.budget``: the run does not start."""


@dataclass(frozen=True)
class JudgeEstimate:
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tokens": self.tokens}


def estimate(
    requests: Sequence[tuple[int, int]], reply_tokens: int, price_input_per_1m: float, price_output_per_1m: float
) -> JudgeEstimate:
    """``requests``: (number of requests, characters each request's record text has) per record."""
    count = sum(n for n, _ in requests)
    prompt = sum(n * -(-chars // CHARS_PER_TOKEN) for n, chars in requests)
    completion = count * reply_tokens
    cost = (prompt * price_input_per_1m + completion * price_output_per_1m) / 1e6
    return JudgeEstimate(count, prompt, completion, cost)


def check_budget(found: JudgeEstimate, budget: Mapping[str, float | None] | None) -> None:
    """JudgeBudgetError when the estimate passes a set limit of ``budget`` (null limits: none)."""
    unknown = sorted(set(budget or {}) - set(BUDGET_KEYS))
    if unknown:
        raise JudgeBudgetError(f"judge.budget: unknown keys {unknown}; expected {list(BUDGET_KEYS)}")
    limits = {k: v for k, v in (budget or {}).items() if v is not None}
    spent = {"usd": found.cost_usd, "tokens": found.tokens}
    over = [f"{k} {spent[k]:.4g} > judge.budget.{k}={v}" for k, v in limits.items() if spent[k] > v]
    if over:
        raise JudgeBudgetError(
            f"the judge would cost more than its budget: estimated {found.requests} requests, "
            f"{found.tokens} tokens, {found.cost_usd:.4f} USD ({'; '.join(over)}): raise judge.budget, "
            "or judge fewer records (data.max_test_samples)"
        )
