"""Turn-level advantage estimators for sessions (``objective.advantage``), each a registered function of a
``TurnBatch`` returning ``(sessions, turns)`` advantages: turn t's tokens get column t.

Notation: a group holds the G sessions of one scenario (contiguous rows); session i has ``T_i`` character turns,
session reward ``R_i`` (``env.rewards``) and turn rewards ``r_it`` (``env.turn_rewards``, weighted sum). Its
per-turn reward is ``r_it`` plus ``R_i`` on its last turn; its return from turn t, discounted by ``gamma``, is
``G_it``; its total ``X_i = R_i + sum_t r_it`` (``G_i1`` when ``gamma`` is 1). A session without a reward
(``scored`` false) gets 0 everywhere and is in no statistic. Scale ``group`` divides by a std (Bessel) plus
``EPS`` as ``group_advantages`` does; ``none`` does not (Dr. GRPO). On one-turn sessions every estimator but
``utterance_share`` equals ``group_advantages`` of ``X`` (``utterance_share``: of ``R``, what it distributes).

- ``session_grpo`` (default, today's): ``group_advantages(X)`` on every turn.
- ``turn_return``: at each turn index t, ``G_it`` normalised over the group's sessions that reach t. Biased when
  the policy controls the length: who reaches t, and so the baseline and the scale, depend on the session itself.
- ``mt_grpo``: ``(1 - mix_weight) * session_grpo + mix_weight * turn_return`` (MT-GRPO's mix of outcome and turn
  advantages, with the return so a turn is also credited for what follows it).
- ``turn_loo``: ``(n - 1) / n * (G_it - b_it)``, ``b_it`` the mean of ``G_jt`` over the OTHER scored sessions of
  the group that reach t (0 when none does), n the group's scored sessions. Unbiased: ``b_it`` and the factor do
  not depend on session i (nor on its length), so each turn's score-function term has expectation zero against
  them; scale ``group`` divides every turn of the group by the std of ``X`` (GRPO's scale, the same at every
  turn, so it rescales the gradient without reweighting turns against each other).
- ``utterance_share``: the session reward distributed over the turns (Sotopia-RL's utterance attribution):
  ``u_it = R_i * T_i * softmax(r_i. / share_temperature)_t``, then normalised over every scored turn of the
  group. Equal turn rewards give every turn ``R_i``; the turn rewards only say which turns earned it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rpbench.core.registry import Registry
from rpbench.core.typed import Problem, Settings
from rpbench.objectives.losses import group_advantages

TURN_ADVANTAGES = Registry("advantage estimator")
EPS = 1e-4  # group_advantages' default


@dataclass(frozen=True, kw_only=True)
class TurnCreditSettings(Settings):
    """``objective.turn_credit``: the estimators' parameters."""

    gamma: float  # turn_return, mt_grpo, turn_loo: discount per turn
    mix_weight: float  # mt_grpo: share of the turn advantage
    share_temperature: float  # utterance_share: softmax temperature of the turn rewards

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if not 0 <= self.gamma <= 1:
            found.append(("gamma", "a number in [0, 1]"))
        if not 0 <= self.mix_weight <= 1:
            found.append(("mix_weight", "a number in [0, 1]"))
        if not self.share_temperature > 0:
            found.append(("share_temperature", "a number > 0"))
        return found


@dataclass(frozen=True)
class TurnBatch:
    """The sessions of a generation batch as an estimator reads them (rows in groups of ``group_size``)."""

    session: torch.Tensor  # (N,) R_i
    turns: torch.Tensor  # (N, T) r_it, 0 past a session's last turn
    lengths: torch.Tensor  # (N,) T_i >= 1
    scored: torch.Tensor  # (N,) bool
    group_size: int
    scale: str  # group | none
    credit: TurnCreditSettings

    @property
    def reach(self) -> torch.Tensor:
        """(N, T) bool: session i has turn t (and is scored)."""
        t = torch.arange(self.turns.shape[1])
        return (t[None, :] < self.lengths[:, None]) & self.scored[:, None]

    @property
    def total(self) -> torch.Tensor:
        return self.session + self.turns.sum(1)

    def returns(self) -> torch.Tensor:
        """(N, T) discounted returns G_it (0 past the last turn)."""
        n, width = self.turns.shape
        last = torch.arange(width)[None, :] == (self.lengths[:, None] - 1)
        step = self.turns + last * self.session[:, None]
        out, later = torch.zeros_like(step), torch.zeros(n, dtype=step.dtype)
        for t in reversed(range(width)):
            later = step[:, t] + self.credit.gamma * later
            out[:, t] = later
        return out * (torch.arange(width)[None, :] < self.lengths[:, None])


Estimator = Callable[[TurnBatch], torch.Tensor]


@TURN_ADVANTAGES.register("session_grpo")
def session_grpo(batch: TurnBatch) -> torch.Tensor:
    a = group_advantages(batch.total, batch.group_size, batch.scale, scored=batch.scored)
    return a[:, None] * batch.reach


@TURN_ADVANTAGES.register("turn_return")
def turn_return(batch: TurnBatch) -> torch.Tensor:
    returns, reach = batch.returns(), batch.reach
    columns = [
        group_advantages(returns[:, t], batch.group_size, batch.scale, scored=reach[:, t])
        for t in range(returns.shape[1])
    ]
    return torch.stack(columns, dim=1)


@TURN_ADVANTAGES.register("mt_grpo")
def mt_grpo(batch: TurnBatch) -> torch.Tensor:
    w = batch.credit.mix_weight
    return (1 - w) * session_grpo(batch) + w * turn_return(batch)


def group_std(values: torch.Tensor, kept: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N,) each row's group std (Bessel) of ``values`` over ``kept``; 1 where fewer than two are kept or they are
    all equal (nothing to scale)."""
    v, k = values.view(-1, group_size), kept.view(-1, group_size)
    n = k.sum(1, keepdim=True)
    mean = (v * k).sum(1, keepdim=True) / n.clamp(min=1)
    var = (((v - mean) * k) ** 2).sum(1, keepdim=True) / (n - 1).clamp(min=1)
    high = v.masked_fill(~k, -torch.inf).amax(1, keepdim=True)
    low = v.masked_fill(~k, torch.inf).amin(1, keepdim=True)
    std = torch.where((n < 2) | (high == low), torch.ones_like(var), var.sqrt() + EPS)
    return std.expand_as(v).reshape(-1)


@TURN_ADVANTAGES.register("turn_loo")
def turn_loo(batch: TurnBatch) -> torch.Tensor:
    g = batch.group_size
    returns, reach = batch.returns(), batch.reach.to(batch.turns.dtype)
    width = returns.shape[1]
    sums = (returns * reach).view(-1, g, width).sum(1, keepdim=True).expand(-1, g, -1).reshape(-1, width)
    counts = reach.view(-1, g, width).sum(1, keepdim=True).expand(-1, g, -1).reshape(-1, width)
    others = (counts - reach).clamp(min=0)
    baseline = torch.where(others > 0, (sums - returns * reach) / others.clamp(min=1), torch.zeros_like(sums))
    n = batch.scored.view(-1, g).sum(1, keepdim=True).expand(-1, g).reshape(-1, 1).to(returns.dtype)
    out = (n - 1) / n.clamp(min=1) * (returns - baseline) * reach
    if batch.scale == "group":
        out = out / group_std(batch.total, batch.scored, g)[:, None]
    return out


@TURN_ADVANTAGES.register("utterance_share")
def utterance_share(batch: TurnBatch) -> torch.Tensor:
    has = torch.arange(batch.turns.shape[1])[None, :] < batch.lengths[:, None]
    logits = (batch.turns / batch.credit.share_temperature).masked_fill(~has, -torch.inf)
    shares = torch.softmax(logits, dim=1)
    credit = batch.session[:, None] * batch.lengths[:, None] * shares
    width = credit.shape[1]  # a group's sessions are contiguous rows: its turns, flattened, are one pool
    pooled = group_advantages(credit.reshape(-1), batch.group_size * width, batch.scale, scored=batch.reach.reshape(-1))
    return pooled.view(-1, width)
