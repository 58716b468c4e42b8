"""ORPO (Hong et al., 2024): odds-ratio preference optimisation, reference-free, in one stage from a base model.

The pairs are rendered, collated and laid out as DPO's (``PreferenceModule``); per pair the loss is the chosen reply's
per-token NLL plus ``losses.orpo_loss``'s odds-ratio term on the replies' per-token mean log-probs (TRL's
ORPOTrainer; TRL takes the NLL's mean over the chosen tokens of a batch, here each pair's token mean is one
pair's share, as DPO's ``sft_weight`` term). No reference model, no reference log-probs. Held-out pairs report
the ORPO loss, the reward accuracy and margin of the implicit rewards ``beta * mean log-prob``, and the
chosen replies' NLL.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rpbench.core.typed import Problem
from rpbench.objectives.config import ObjectiveSettings
from rpbench.objectives.dpo import PAIR_LAYOUTS, PreferenceModule
from rpbench.objectives.losses import orpo_loss
from rpbench.objectives.registry import OBJECTIVES


@dataclass(frozen=True, kw_only=True)
class ORPOSettings(ObjectiveSettings):
    """conf/objective/orpo.yaml."""

    beta: float
    pair_layout: str

    def problems(self) -> list[Problem]:
        found = super().problems()
        if self.pair_layout not in PAIR_LAYOUTS:
            found.append(("pair_layout", f"one of {', '.join(PAIR_LAYOUTS)}"))
        if not self.beta > 0:
            found.append(("beta", "a number > 0 (the odds-ratio weight)"))
        return found


@OBJECTIVES.register("orpo")
class ORPOModule(PreferenceModule):
    needs_tuned_start = False  # ORPO trains the SFT and preference terms together, from a base model
    config_class = ORPOSettings
    loss_name = "orpo_loss"
    logs_chosen_nll = True  # its loss holds the chosen NLL (nll_weight stays 0: not added twice)

    def pair_terms(self, batch) -> dict[str, torch.Tensor]:
        """Per pair: the ORPO loss (chosen NLL + odds-ratio term), rewards, summed log-probs and chosen NLL."""
        n = len(batch["id"])
        logps, counts = self.policy_logps(batch)
        means = logps / counts.clamp(min=1)
        odds_ratio_terms, _ = orpo_loss(means[:n], means[n:], beta=self.config.beta)
        chosen_nll = -means[:n]
        rewards = self.config.beta * means.detach()
        return {
            "losses": chosen_nll + odds_ratio_terms,
            "chosen_rewards": rewards[:n],
            "rejected_rewards": rewards[n:],
            "chosen_logps": logps[:n],
            "rejected_logps": logps[n:],
            "chosen_nll": chosen_nll,
        }
