"""Pure loss functions over log-probabilities for the DPO family (DPO, ORPO, KTO) and GRPO.

Every function here is stateless and device-agnostic; the LightningModules only wire them together, and
the log-probabilities come from ``rpbench.models.forward`` (the SFT loss is its ``supervised_nll_sum``).
Per-token GRPO tensors are ``(batch, completion_len)`` and aligned with the completion tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rpbench.core.registry import Registry

ADVANTAGE_SCALES = ("group", "batch", "none")
AGGREGATION_MODES = ("token_mean", "seq_mean", "dr_grpo")


# ---------------------------------------------------------------------------------------------------------
# DPO


@dataclass(frozen=True)
class PairLoss:
    """A registered DPO loss type: per-pair losses from the log-ratios ``c = pc - rc`` and ``r = pr - rr``
    (``fn(c, r, beta, ls)``); ``smoothed``: it reads ``label_smoothing`` (else a non-zero value is an error);
    ``needs_smoothing``: it is undefined without it."""

    fn: Callable[[torch.Tensor, torch.Tensor, float, float], torch.Tensor]
    smoothed: bool = False
    needs_smoothing: bool = False


DPO_LOSSES = Registry("DPO loss_type")


def pair_loss(name: str, smoothed: bool = False, needs_smoothing: bool = False):
    """Register ``fn(c, r, beta, ls)`` as the DPO loss type ``name`` (``objective.loss_type``)."""

    def register(fn):
        DPO_LOSSES.register(name)(PairLoss(fn, smoothed, needs_smoothing))
        return fn

    return register


@pair_loss("sigmoid", smoothed=True)
def sigmoid_loss(c, r, beta, ls):
    return -(1 - ls) * F.logsigmoid(beta * (c - r)) - ls * F.logsigmoid(-beta * (c - r))


@pair_loss("hinge")
def hinge_loss(c, r, beta, ls):
    return torch.relu(1 - beta * (c - r))


@pair_loss("ipo")
def ipo_loss(c, r, beta, ls):
    return (c - r - 1 / (2 * beta)) ** 2


@pair_loss("robust", smoothed=True)
def robust_loss(c, r, beta, ls):
    return (-(1 - ls) * F.logsigmoid(beta * (c - r)) + ls * F.logsigmoid(-beta * (c - r))) / (1 - 2 * ls)


@pair_loss("exo_pair", smoothed=True, needs_smoothing=True)
def exo_pair_loss(c, r, beta, ls):
    logits = beta * (c - r)
    return torch.sigmoid(logits) * (F.logsigmoid(logits) - math.log1p(-ls)) + torch.sigmoid(-logits) * (
        F.logsigmoid(-logits) - math.log(ls)
    )


@pair_loss("sppo_hard")
def sppo_hard_loss(c, r, beta, ls):
    return (c - 0.5 / beta) ** 2 + (r + 0.5 / beta) ** 2


@pair_loss("nca_pair")
def nca_pair_loss(c, r, beta, ls):
    return -F.logsigmoid(beta * c) - 0.5 * F.logsigmoid(-beta * c) - 0.5 * F.logsigmoid(-beta * r)


@pair_loss("bco_pair")
def bco_pair_loss(c, r, beta, ls):
    return -F.logsigmoid(beta * c) - F.logsigmoid(-beta * r)


@pair_loss("apo_zero")
def apo_zero_loss(c, r, beta, ls):
    return 1 - torch.sigmoid(beta * c) + torch.sigmoid(beta * r)


@pair_loss("apo_down")
def apo_down_loss(c, r, beta, ls):
    return torch.sigmoid(beta * c) + 1 - torch.sigmoid(beta * (c - r))


def check_dpo_settings(loss_type: str, beta: float, label_smoothing: float) -> PairLoss:
    """The registered loss type, after checking ``beta`` and ``label_smoothing`` fit it."""
    loss = DPO_LOSSES.get(loss_type)
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must lie in [0, 0.5), got {label_smoothing}")
    smoothed = [name for name in DPO_LOSSES.names() if DPO_LOSSES.get(name).smoothed]
    if label_smoothing and not loss.smoothed:
        raise ValueError(f"label_smoothing applies to {', '.join(smoothed)} only, not {loss_type!r}")
    if loss.needs_smoothing and not label_smoothing:
        raise ValueError(f"loss_type {loss_type!r} needs label_smoothing > 0 (the EXO paper uses 1e-3)")
    return loss


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float,
    loss_type: str,
    label_smoothing: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair DPO losses and the implicit rewards ``beta * (policy - ref)`` of chosen and rejected.

    Inputs are ``(batch,)`` sequence log-probabilities (:func:`sequence_logps` sums). The formulas are TRL's
    (``DPOTrainer``, reverse-KL) with ``d = (pc - rc) - (pr - rr)``:

    - ``sigmoid``: ``-(1 - ls) * logsigmoid(beta * d) - ls * logsigmoid(-beta * d)``: DPO, and for
      ``ls > 0`` conservative DPO (cDPO), as TRL's ``sigmoid`` before 1.0 and its ``aot`` on one pair;
    - ``hinge``: ``relu(1 - beta * d)``;
    - ``ipo``: ``(d - 1 / (2 * beta)) ** 2``. TRL divides each log-ratio by its completion's token count;
      here the caller normalises: pass per-token mean log-probs (``sum_logps / n_tokens``) for policy and
      reference alike. The returned rewards are then per token too;
    - ``robust``: ``(-(1 - ls) * logsigmoid(beta * d) + ls * logsigmoid(-beta * d)) / (1 - 2 * ls)``;
    - ``exo_pair`` (EXO, eq. 16): ``q * (logsigmoid(beta * d) - log(1 - ls)) + (1 - q) * (logsigmoid(-beta * d)
      - log(ls))`` with ``q = sigmoid(beta * d)``; needs ``ls > 0`` (the EXO paper uses 1e-3);
    - with the rewards ``c = beta * (pc - rc)`` and ``r = beta * (pr - rr)``: ``nca_pair``: ``-logsigmoid(c)
      - logsigmoid(-c) / 2 - logsigmoid(-r) / 2``; ``bco_pair``: ``-logsigmoid(c) - logsigmoid(-r)`` (TRL
      >= 1.0: no running reward baseline); ``apo_zero``: ``1 - sigmoid(c) + sigmoid(r)``; ``apo_down``:
      ``sigmoid(c) + 1 - sigmoid(c - r)``;
    - ``sppo_hard``: ``(pc - rc - 1 / (2 * beta)) ** 2 + (pr - rr + 1 / (2 * beta)) ** 2``.

    Each type is a registered function (``DPO_LOSSES``; a new one is a ``@pair_loss`` function).
    ``label_smoothing`` (``ls``, the assumed label-flip probability, in ``[0, 0.5)``) applies to the smoothed
    types only; a non-zero value with another is an error. An optional SFT (NLL) term on the chosen
    responses is the caller's to add.
    """
    loss = check_dpo_settings(loss_type, beta, label_smoothing)
    chosen_logratios = policy_chosen_logps - ref_chosen_logps
    rejected_logratios = policy_rejected_logps - ref_rejected_logps
    losses = loss.fn(chosen_logratios, rejected_logratios, beta, label_smoothing)
    return losses, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, accurate near 0 and far below it (Maechler's two branches)."""
    return torch.where(x > -math.log(2), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def orpo_loss(
    chosen_mean_logps: torch.Tensor, rejected_mean_logps: torch.Tensor, *, beta: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair ORPO odds-ratio terms (to add to the chosen reply's NLL), and the log odds ratios.

    Inputs are ``(batch,)`` per-token mean log-probs (``p = exp(mean)``), as TRL's ORPOTrainer reads them:
    ``log_odds = (pc - pr) - (log(1 - exp(pc)) - log(1 - exp(pr)))``, term ``-beta * logsigmoid(log_odds)``
    (``beta``: the paper's lambda). Reference-free: the implicit rewards TRL logs are ``beta * p``.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    log_odds = (chosen_mean_logps - rejected_mean_logps) - (log1mexp(chosen_mean_logps) - log1mexp(rejected_mean_logps))
    return -beta * F.logsigmoid(log_odds), log_odds.detach()


def kto_kl(policy_mismatched_logps: torch.Tensor, ref_mismatched_logps: torch.Tensor) -> torch.Tensor:
    """KTO's reference point: the batch-mean log-ratio of mismatched (prompt, completion) pairs, detached and
    clamped at 0 (TRL's ``KL``; averaged over ranks by the caller before the clamp when there are several)."""
    return (policy_mismatched_logps - ref_mismatched_logps).mean().detach()


def kto_loss(
    policy_logps: torch.Tensor,
    ref_logps: torch.Tensor,
    desirable: torch.Tensor,
    kl: torch.Tensor,
    *,
    beta: float,
    desirable_weight: float,
    undesirable_weight: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-completion KTO losses (eq. 7 of the KTO paper, TRL's ``kto`` loss) and implicit rewards.

    ``r = policy - ref`` (summed log-probs); a ``desirable`` completion has loss ``desirable_weight * (1 -
    sigmoid(beta * (r - kl)))``, an undesirable one ``undesirable_weight * (1 - sigmoid(beta * (kl - r)))``,
    with ``kl`` the reference point (``kto_kl``, clamped at 0 here). Rewards: ``beta * r``.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if desirable_weight < 0 or undesirable_weight < 0:
        raise ValueError(
            f"desirable_weight and undesirable_weight must be >= 0, got {desirable_weight}, {undesirable_weight}"
        )
    logratios = policy_logps - ref_logps
    kl = kl.clamp(min=0).detach()
    losses = torch.where(
        desirable,
        desirable_weight * (1 - torch.sigmoid(beta * (logratios - kl))),
        undesirable_weight * (1 - torch.sigmoid(beta * (kl - logratios))),
    )
    return losses, beta * logratios.detach()


# ---------------------------------------------------------------------------------------------------------
# GRPO


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    scale: str = "group",
    eps: float = 1e-4,
    scored: torch.Tensor | None = None,
) -> torch.Tensor:
    """Group-relative advantages ``(r - mean_group) / (std + eps)`` for ``(n_prompts * group_size,)`` rewards.

    The completions of one prompt must be contiguous (the repeat sampler's order). ``scale``: ``group``
    divides by the group's std, ``batch`` by the std of all rewards (as in TRL, both with Bessel's
    correction), ``none`` does not divide (Dr. GRPO). A group whose rewards are all equal gets exactly zero
    advantage. ``scored`` (bool, one per reward; None: all): a completion without a reward (a session cut
    short, a judge's failed verdict) gets zero advantage and is left out of its group's mean and std and of
    the batch std; its entry of ``rewards`` is not read. A group with fewer than two scored completions gets
    zero advantage.
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be one of {ADVANTAGE_SCALES}, got {scale!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D, got shape {tuple(rewards.shape)}")
    if group_size < 2 or rewards.numel() % group_size:
        raise ValueError(f"group_size must be >= 2 and divide the {rewards.numel()} rewards, got {group_size}")
    scored = torch.ones_like(rewards, dtype=torch.bool) if scored is None else scored.to(torch.bool)
    if scored.shape != rewards.shape:
        raise ValueError(f"scored must have the rewards' shape {tuple(rewards.shape)}, got {tuple(scored.shape)}")
    if not torch.isfinite(rewards[scored]).all():
        raise ValueError(f"rewards must be finite, got {rewards.tolist()}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    kept = scored.view(-1, group_size)
    groups = rewards.masked_fill(~scored, 0.0).view(-1, group_size)
    n = kept.sum(dim=1, keepdim=True)
    mean = groups.sum(dim=1, keepdim=True) / n.clamp(min=1)
    high = groups.masked_fill(~kept, -torch.inf).amax(dim=1, keepdim=True)
    low = groups.masked_fill(~kept, torch.inf).amin(dim=1, keepdim=True)
    constant = (n < 2) | (high == low)
    centred = (groups - mean).masked_fill(constant | ~kept, 0.0)
    if scale != "none":
        if scale == "group":  # Bessel's correction over the scored completions
            std = ((centred**2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()
        else:  # fewer than two scored in the batch: every group is constant, the std is not read
            std = rewards[scored].std().expand_as(constant)
        centred = centred / (std.masked_fill(constant, 1.0) + eps)
    return centred.reshape(-1)


def clipped_policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO/GRPO clipped-ratio surrogate per token, and the fraction of masked tokens that were clipped.

    ``loss = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)`` with ``ratio = exp(logps -
    old_logps)``; ``advantages`` is ``(batch,)`` (one per completion) or per token. ``eps_high > eps_low``
    is DAPO's clip-higher (e.g. 0.28). A token counts as clipped when the clipped branch is the active one
    (``ratio < 1 - eps_low`` with ``A < 0``, or ``ratio > 1 + eps_high`` with ``A > 0``). The loss is not
    masked; :func:`aggregate_loss` applies the mask.
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"eps_low and eps_high must be >= 0, got {eps_low} and {eps_high}")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = torch.exp(logps - old_logps)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages
    per_token = -torch.min(unclipped, clipped)
    is_clipped = ((ratio < 1 - eps_low) & (advantages < 0)) | ((ratio > 1 + eps_high) & (advantages > 0))
    mask = mask.to(per_token.dtype)
    clip_fraction = (is_clipped.to(per_token.dtype) * mask).sum() / mask.sum().clamp(min=1)
    return per_token, clip_fraction.detach()


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0).

    Add ``beta * k3_kl(...)`` to the per-token policy loss before :func:`aggregate_loss`, as TRL does.
    """
    log_ratio = ref_logps - logps
    return torch.exp(log_ratio) - log_ratio - 1


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token_mean",
    max_completion_length: int | None = None,
) -> torch.Tensor:
    """Reduce a ``(batch, len)`` per-token loss over the masked tokens to a scalar.

    - ``token_mean`` (DAPO, TRL's ``bnpo``): sum over all tokens / number of tokens;
    - ``seq_mean`` (original GRPO): mean over sequences of each sequence's token mean;
    - ``dr_grpo``: sum over all tokens / (batch * ``max_completion_length``), a constant normaliser.
    Empty sequences or batches contribute zero (counts are clamped to 1).
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"mode must be one of {AGGREGATION_MODES}, got {mode!r}")
    if per_token.shape != mask.shape:
        raise ValueError(f"per_token {tuple(per_token.shape)} and mask {tuple(mask.shape)} must match")
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    if mode == "token_mean":
        return masked.sum() / mask.sum().clamp(min=1)
    if mode == "seq_mean":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if max_completion_length is None or max_completion_length < 1:
        raise ValueError(f"mode 'dr_grpo' needs max_completion_length >= 1, got {max_completion_length}")
    return masked.sum() / (per_token.size(0) * max_completion_length)
