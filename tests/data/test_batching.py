"""Step plans: the loss is the mean over every supervised token of the global batch."""

from __future__ import annotations

import pytest
import torch

from rpbench.data.batching import plan_steps, shuffled_chunks


def test_loss_scales_by_hand():
    # 3 micro-batches, world 1, accum 2: step 1 = batches 0,1 (2+3 and 5 tokens), step 2 = batch 2 + a repeat.
    tokens = [2, 3, 5, 4]
    plan = plan_steps([[0, 1], [2], [3]], tokens, world_size=1, grad_accum=2, rank=0)
    assert [m.indices for m in plan] == [(0, 1), (2,), (3,), (0, 1)]
    assert [m.loss_scale for m in plan] == pytest.approx([2 / 10, 2 / 10, 2 / 4, 0.0])


def test_every_rank_runs_the_same_number_of_micro_batches():
    batches = shuffled_chunks(23, 3, seed=0)
    plans = [plan_steps(batches, [1] * 23, world_size=3, grad_accum=2, rank=r) for r in range(3)]
    assert len({len(p) for p in plans}) == 1
    real = sorted(i for p in plans for m in p if m.loss_scale > 0 for i in m.indices)
    assert real == list(range(23))


def test_planned_gradient_equals_the_global_token_mean_gradient():
    """Simulate Lightning (divide by grad_accum) and DDP (average over ranks) and compare gradients."""
    torch.manual_seed(0)
    n, world, accum = 11, 2, 2
    lengths = torch.randint(1, 6, (n,)).tolist()
    features = [torch.randn(length, 3) for length in lengths]
    weight = torch.randn(3, requires_grad=True)
    nll = lambda i: (features[i] @ weight).pow(2)  # noqa: E731  per-token loss of sample i

    batches = shuffled_chunks(n, 2, seed=1)
    per_step = world * accum
    steps = -(-len(batches) // per_step)
    plans = [plan_steps(batches, lengths, world_size=world, grad_accum=accum, rank=r) for r in range(world)]
    for step in range(steps):
        step_batches = batches[step * per_step : (step + 1) * per_step]
        target = torch.cat([nll(i) for b in step_batches for i in b]).mean()
        (expected,) = torch.autograd.grad(target, weight)
        grads = []
        for plan in plans:
            micro = plan[step * accum : (step + 1) * accum]
            loss = sum(torch.cat([nll(i) for i in m.indices]).sum() * m.loss_scale / accum for m in micro)
            grads.append(torch.autograd.grad(loss, weight)[0])
        assert torch.allclose(torch.stack(grads).mean(0), expected, atol=1e-6)
