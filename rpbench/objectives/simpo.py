"""SimPO: reference-free preference optimisation on chosen/rejected pairs (Meng, Xia and Chen, 2024).

The implicit reward of a reply is its length-normalised log-prob, ``beta * logp / n_tokens``; a pair's loss
asks the chosen reward to exceed the rejected one by a target margin ``gamma``:
``-(1 - ls) * logsigmoid(beta * m - gamma) - ls * logsigmoid(-(beta * m - gamma))`` with ``m`` the
difference of the per-token mean log-probs and ``gamma = gamma_beta_ratio * beta``. This is TRL's
``CPOTrainer`` with ``loss_type="simpo"`` (its ``simpo_gamma`` is ``gamma``; ``label_smoothing`` ``ls``) and
the SimPO authors' trainer (``gamma_beta_ratio``). ``cpo_alpha`` adds the chosen reply's per-token NLL, as
TRL's CPO does (its behaviour-cloning term); rpbench averages it per pair and then over pairs, TRL over the
micro-batch's chosen tokens (the same when the chosen replies are equally long). No reference model: pairs
are rendered, batched and validated as for DPO (``dpo.PreferenceModule``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rpbench.core.typed import Problem
from rpbench.objectives.config import ObjectiveSettings
from rpbench.objectives.dpo import PAIR_LAYOUTS, PreferenceModule, preference_terms
from rpbench.objectives.registry import OBJECTIVES


def simpo_loss(
    chosen_mean_logps: torch.Tensor,
    rejected_mean_logps: torch.Tensor,
    *,
    beta: float,
    gamma: float,
    label_smoothing: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair SimPO losses and the rewards ``beta * mean logp`` of chosen and rejected (``(batch,)`` per-token
    mean log-probs of each reply)."""
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must lie in [0, 0.5), got {label_smoothing}")
    logits = beta * (chosen_mean_logps - rejected_mean_logps) - gamma
    losses = -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    return losses, beta * chosen_mean_logps.detach(), beta * rejected_mean_logps.detach()


@dataclass(frozen=True, kw_only=True)
class SimPOSettings(ObjectiveSettings):
    """conf/objective/simpo.yaml."""

    beta: float
    gamma_beta_ratio: float
    label_smoothing: float
    cpo_alpha: float
    pair_layout: str

    def problems(self) -> list[Problem]:
        found = super().problems()
        if self.pair_layout not in PAIR_LAYOUTS:
            found.append(("pair_layout", f"one of {', '.join(PAIR_LAYOUTS)}"))
        if self.cpo_alpha < 0:
            found.append(("cpo_alpha", "a number >= 0"))
        if self.gamma_beta_ratio < 0:
            found.append(("gamma_beta_ratio", "a number >= 0"))
        if not found:
            try:  # the loss checks beta and label_smoothing (its message starts with the key)
                zero = torch.zeros(1)
                simpo_loss(zero, zero, beta=self.beta, gamma=self.gamma, label_smoothing=self.label_smoothing)
            except ValueError as error:
                found.append(str(error))
        return found

    @property
    def gamma(self) -> float:
        """The target reward margin (TRL's ``simpo_gamma``)."""
        return self.gamma_beta_ratio * self.beta


@OBJECTIVES.register("simpo")
class SimPOModule(PreferenceModule):
    loss_name = "simpo_loss"
    config_class = SimPOSettings

    def __init__(self, model, tokenizer, cfg):
        super().__init__(model, tokenizer, cfg)
        self.nll_weight = self.config.cpo_alpha

    def pair_terms(self, batch) -> dict[str, torch.Tensor]:
        """Per pair: SimPO loss, rewards, summed log-probs, and the chosen reply's per-token NLL."""
        n = len(batch["id"])
        logps, counts = self.policy_logps(batch)
        means = logps / counts.clamp(min=1)
        config = self.config
        losses = simpo_loss(
            means[:n], means[n:], beta=config.beta, gamma=config.gamma, label_smoothing=config.label_smoothing
        )
        return preference_terms(*losses, logps, counts)
