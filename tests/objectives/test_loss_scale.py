"""The backward loss factor: one global token mean whatever divides the loss by the accumulation count."""

from __future__ import annotations

import pytest

from rpbench.data.batching import plan_steps
from rpbench.objectives.base import backward_loss_factor

# One optimiser step on 2 ranks x 2 accumulated micro-batches of one sample each: summed NLL and tokens.
NLL = [3.0, 7.0, 5.0, 1.0]  # micro-batches 0..3; rank r runs micro-batches r and r + 2
TOKENS = [2, 3, 2, 1]


@pytest.mark.parametrize(
    ("strategy", "engine_divides"),
    [("DDPStrategy", False), ("DeepSpeedStrategy", True), ("SingleDeviceStrategy", False)],
)
def test_the_step_loss_is_the_global_token_mean_under_each_strategy(strategy, engine_divides):
    world, accum = 2, 2
    factor = backward_loss_factor(strategy, accum)
    assert factor == (2 if engine_divides else 1)
    per_rank = []
    for rank in range(world):
        plan = plan_steps([[0], [1], [2], [3]], TOKENS, world_size=world, grad_accum=accum, rank=rank)
        total = 0.0
        for micro in plan:
            (i,) = micro.indices
            loss = NLL[i] * micro.loss_scale * factor / accum  # Lightning's division
            total += loss / accum if engine_divides else loss  # DeepSpeed's engine divides again
        per_rank.append(total)
    # ranks average their gradients: the step's loss is sum(NLL) / sum(tokens) = 16 / 8
    assert sum(per_rank) / world == pytest.approx(2.0)
