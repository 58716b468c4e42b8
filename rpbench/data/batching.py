"""Optimizer-step plans: which micro-batches each rank runs, and the loss scale that makes the loss the
mean over every supervised token of the global batch.

A global step is ``world_size * grad_accum`` micro-batches. Each micro-batch's loss is
``nll_sum * loss_scale`` with ``loss_scale = world_size * grad_accum / step_tokens``: Lightning divides by
``grad_accum`` and DDP averages over ranks, so the step's gradient is that of
``sum(nll) / step_tokens`` exactly, however tokens are spread over padding, micro-batches and ranks.
The last step is filled with repeated micro-batches of weight 0, so every rank runs the same number of
forward calls (ZeRO-3 and FSDP would hang otherwise).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MicroBatch:
    indices: tuple[int, ...]
    loss_scale: float


def shuffled_chunks(n: int, batch_size: int, seed: int, shuffle: bool = True, min_size: int = 1) -> list[list[int]]:
    """Indices 0..n-1 (shuffled with ``seed``) cut into batches of ``batch_size``; a last batch smaller than
    ``min_size`` joins the one before it (n < ``min_size``: a ValueError)."""
    if 0 < n < min_size:
        raise ValueError(f"{n} sample(s): a micro-batch needs at least {min_size}")
    order = list(range(n))
    if shuffle:
        random.Random(seed).shuffle(order)
    chunks = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    if len(chunks) > 1 and len(chunks[-1]) < min_size:
        last = chunks.pop()
        chunks[-1] += last
    return chunks


def plan_steps(
    batches: Sequence[Sequence[int]], tokens: Sequence[int], *, world_size: int, grad_accum: int, rank: int
) -> list[MicroBatch]:
    """This rank's micro-batches, in order, for the global batch list ``batches``.

    ``tokens[i]`` is the number of supervised tokens of sample ``i``.
    """
    if not batches:
        return []
    per_step = world_size * grad_accum
    padded = [(tuple(b), 1.0) for b in batches]
    shortfall = -len(padded) % per_step
    padded += [(padded[i % len(batches)][0], 0.0) for i in range(shortfall)]
    plan: list[MicroBatch] = []
    for start in range(0, len(padded), per_step):
        step = padded[start : start + per_step]
        step_tokens = sum(weight * sum(tokens[i] for i in b) for b, weight in step)
        scale = per_step / step_tokens if step_tokens else 0.0
        for indices, weight in step[rank::world_size]:
            plan.append(MicroBatch(indices, scale * weight))
    return plan
