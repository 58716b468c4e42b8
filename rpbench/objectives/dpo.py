"""Direct preference optimisation on chosen/rejected pairs rendered through the chat template.

A micro-batch of B pairs is one forward of 2B rows (the chosen rows, then the rejected rows); only the reply
tokens (content and end-of-turn) are labelled: of a pair of whole sessions (``data=session_pairs``), every
assistant turn's, so a side's log-prob is the sum over its assistant turns. ``pair_layout`` says whether that
forward is padded or packed (the rows back to back in one row, no padding, attention isolated per row;
``auto``: packed where the attention backend is a flash-attention varlen kernel, which skips the masked
blocks, padded otherwise). The loss is the mean over every pair of the global batch of ``losses.dpo_loss`` (+
``sft_weight`` times the chosen reply's per-token NLL). The reference is a frozen copy, the LoRA-disabled
base, or (the default) log-probs precomputed once (``precompute_ref``; see reference.py): at setup, or at fit
start from the engine's partitioned model when the models are built in ``configure_model`` (ZeRO-3).

``PreferenceModule`` holds what every objective on pairs shares (SimPO's too: simpo.py).
Validation on held-out pairs reports the DPO loss (``val/loss``), the reward accuracy and margin, and the
chosen replies' per-token NLL (``val/chosen_nll``; its exp is the run's held-out ``perplexity``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info

from rpbench.core.typed import Problem
from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.collate import pad_collate, unpad
from rpbench.data.records import PreferenceExample, SessionPreferenceExample
from rpbench.models.forward import sequence_logps, uses_varlen_kernel
from rpbench.objectives.base import ObjectiveModule
from rpbench.objectives.config import ObjectiveSettings
from rpbench.objectives.losses import DPO_LOSSES, check_dpo_settings, dpo_loss
from rpbench.objectives.reference import (
    PrecomputedReference,
    drop_reference_weights,
    live_reference,
    restore_reference_weights,
    sample_fingerprint,
)
from rpbench.objectives.registry import OBJECTIVES

REFERENCE_CACHE_NAME = "reference_logps.json"
VALIDATION_SUMS = ("loss", "correct", "margin", "chosen_nll", "pairs")
PAIR_LAYOUTS = ("auto", "packed", "padded")


@dataclass(frozen=True, kw_only=True)
class DPOSettings(ObjectiveSettings):
    """conf/objective/dpo.yaml."""

    beta: float
    loss_type: str
    label_smoothing: float
    sft_weight: float
    precompute_ref: bool
    ref_cache: str | None
    pair_layout: str

    def problems(self) -> list[Problem]:
        found = super().problems()
        if self.pair_layout not in PAIR_LAYOUTS:
            found.append(("pair_layout", f"one of {', '.join(PAIR_LAYOUTS)}"))
        if self.loss_type not in DPO_LOSSES:
            found.append(("loss_type", f"one of {', '.join(DPO_LOSSES.names())}"))
        if self.sft_weight < 0:
            found.append(("sft_weight", "a number >= 0"))
        if not found:
            try:  # beta and label_smoothing against the loss type (the message starts with the key)
                check_dpo_settings(self.loss_type, self.beta, self.label_smoothing)
            except ValueError as error:
                found.append(str(error))
        return found


def packs_pairs(pair_layout: str, model) -> bool:
    """Whether a micro-batch's rows go through the model packed (``pair_layout`` auto: on flash-attention
    varlen kernels; sdpa and eager pay attention over the whole packed row through a dense block mask)."""
    if pair_layout != "auto":
        return pair_layout == "packed"
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return uses_varlen_kernel(causal_lm.config._attn_implementation)


def pair_sample(
    sample_id: str,
    chosen_ids: list[int],
    chosen_labels: list[int],
    rejected_ids: list[int],
    rejected_labels: list[int],
    images: Sequence[str] = (),
) -> dict[str, Any]:
    """A DPO sample: both rows, the prompt's images (shared by both) and the fingerprint the reference cache
    keys on."""
    return {
        "id": sample_id,
        "chosen_input_ids": chosen_ids,
        "chosen_labels": chosen_labels,
        "rejected_input_ids": rejected_ids,
        "rejected_labels": rejected_labels,
        "images": list(images),
        "fingerprint": sample_fingerprint(chosen_ids, chosen_labels, rejected_ids, rejected_labels, list(images)),
    }


def preference_terms(
    losses: torch.Tensor,
    chosen_rewards: torch.Tensor,
    rejected_rewards: torch.Tensor,
    logps: torch.Tensor,
    counts: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """What ``PreferenceModule.pair_terms`` returns: a loss's per-pair values and rewards, with the summed
    log-probs of both replies and the chosen reply's per-token NLL (``logps``/``counts``: the batch's rows,
    chosen first)."""
    n = len(losses)
    return {
        "losses": losses,
        "chosen_rewards": chosen_rewards,
        "rejected_rewards": rejected_rewards,
        "chosen_logps": logps[:n],
        "rejected_logps": logps[n:],
        "chosen_nll": -logps[:n] / counts[:n].clamp(min=1),
    }


class PreferenceModule(ObjectiveModule):
    """An objective on chosen/rejected pairs: rendering, collation, the policy's sequence log-probs of both
    replies (``policy_logps``), the optional chosen-reply NLL term (``nll_weight``), logging and held-out
    metrics. A subclass sets ``loss_name`` and implements ``pair_terms`` (per pair: ``losses``, the implicit
    rewards, log-probs and the chosen NLL); its config has ``pair_layout``."""

    data_split = "pairs"
    needs_tuned_start = True
    supports_packing = False
    record_types = (PreferenceExample, SessionPreferenceExample)
    loss_name: str  # its per-pair loss, logged as train/<loss_name>

    @staticmethod
    def render(
        examples: Sequence[PreferenceExample | SessionPreferenceExample], renderer: ChatRenderer
    ) -> tuple[list[dict], list[str]]:
        """One sample per pair, the prompt rendered and truncated once for both replies (only the replies
        are labelled); a pair of whole sessions (``data=session_pairs``): each session rendered after the
        prompt as a training conversation, every assistant turn labelled, the user turns not (an over-long
        session loses its oldest turns, then its end, as in SFT). Pairs whose chosen or rejected side has no
        token left are reported."""
        samples, empty = [], []
        for example in examples:
            if isinstance(example, SessionPreferenceExample):
                sessions = (example.chosen, example.rejected)
                chosen, rejected = (renderer.render_conversation([*example.prompt, *s]) for s in sessions)
            else:
                chosen, rejected = renderer.render_replies(example.prompt, [example.chosen, example.rejected])
            if not (chosen.n_supervised and rejected.n_supervised):
                empty.append(example.id)
                continue
            samples.append(
                pair_sample(
                    example.id, chosen.input_ids, chosen.labels, rejected.input_ids, rejected.labels, chosen.images
                )
            )
        return samples, empty

    @staticmethod
    def collate(samples: list[dict], pad_token_id: int) -> dict:
        """One padded batch: rows ``0..B-1`` the chosen replies, rows ``B..2B-1`` the rejected ones (``images``:
        each row's prompt images)."""
        rows = [
            {"input_ids": s[f"{side}_input_ids"], "labels": s[f"{side}_labels"]}
            for side in ("chosen", "rejected")
            for s in samples
        ]
        batch = pad_collate(rows, pad_token_id)
        batch["id"] = [s["id"] for s in samples]
        batch["images"] = [s["images"] for s in samples] * 2
        batch["fingerprint"] = [s["fingerprint"] for s in samples]
        return batch

    @staticmethod
    def supervised_tokens(samples: Sequence[dict]) -> dict[str, int]:
        """Reply tokens labelled in the chosen and in the rejected rows (each row's first label is never one)."""
        return {
            side: sum(label != IGNORE_INDEX for s in samples for label in s[f"{side}_labels"][1:])
            for side in ("chosen", "rejected")
        }

    @staticmethod
    def sample_weight(sample: dict) -> int:
        """Every pair weighs the same in the global-batch mean."""
        return 1

    def __init__(self, model, tokenizer, cfg):
        super().__init__(model, tokenizer, cfg)
        self.nll_weight = 0.0  # weight of the chosen reply's per-token NLL added to each pair's loss (0: off)
        self._val_sums: torch.Tensor | None = None

    def on_models_built(self) -> None:
        self.packed_pairs = packs_pairs(self.config.pair_layout, self.model)

    def policy_logps(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed log-probs [2B] and labelled-token counts [2B] of the batch's rows (chosen, then rejected)."""
        return sequence_logps(self.model, unpad(batch) if self.packed_pairs else batch)

    def pair_terms(self, batch) -> dict[str, torch.Tensor]:
        """Per pair: ``losses``, ``chosen_rewards``, ``rejected_rewards``, ``chosen_logps``, ``rejected_logps``,
        ``chosen_nll``."""
        raise NotImplementedError

    @property
    def logs_chosen_nll(self) -> bool:
        """Whether the chosen replies' NLL is part of the loss (and so logged apart)."""
        return self.nll_weight != 0

    def training_step(self, batch, batch_idx):
        terms = self.pair_terms(batch)
        per_pair = terms["losses"] + self.nll_weight * terms["chosen_nll"] if self.nll_weight else terms["losses"]
        if batch["loss_scale"] > 0:  # repeated micro-batches that only even out ranks are not logged
            self._log_pairs(terms, per_pair)
        return per_pair.sum() * batch["loss_scale"] * self.backward_factor

    def _log_pairs(self, terms: dict[str, torch.Tensor], per_pair: torch.Tensor) -> None:
        chosen, rejected = terms["chosen_rewards"], terms["rejected_rewards"]
        metrics = {
            f"train/{self.loss_name}": terms["losses"].detach().mean(),
            "train/rewards/chosen": chosen.mean(),
            "train/rewards/rejected": rejected.mean(),
            "train/rewards/accuracy": (chosen > rejected).float().mean(),
            "train/rewards/margin": (chosen - rejected).mean(),
            "train/logps/chosen": terms["chosen_logps"].detach().mean(),
            "train/logps/rejected": terms["rejected_logps"].detach().mean(),
        }
        if self.logs_chosen_nll:
            metrics["train/chosen_nll"] = terms["chosen_nll"].detach().mean()
        self.log("train/loss", per_pair.detach().mean(), prog_bar=True, rank_zero_only=True)
        self.log_dict(metrics, rank_zero_only=True)

    # -- held-out pairs ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(len(VALIDATION_SUMS), device=self.device, dtype=torch.float64)

    def validation_step(self, batch, batch_idx) -> None:
        terms = self.pair_terms(batch)
        live = float(batch["loss_scale"] > 0)
        margin = terms["chosen_rewards"] - terms["rejected_rewards"]
        sums = torch.stack(
            [
                terms["losses"].sum(),
                (margin > 0).sum(),
                margin.sum(),
                terms["chosen_nll"].sum(),
                torch.tensor(float(len(batch["id"])), device=margin.device),
            ]
        )
        self._val_sums += sums.detach().double() * live

    def on_validation_epoch_end(self) -> None:
        totals = self.trainer.strategy.reduce(self._val_sums, reduce_op="sum").tolist()
        sums = dict(zip(VALIDATION_SUMS, totals, strict=True))
        pairs = sums.pop("pairs")
        if pairs > 0:
            means = {key: value / pairs for key, value in sums.items()}
            self.last_validation = {
                "loss": means["loss"],
                "reward_accuracy": means["correct"],
                "reward_margin": means["margin"],
                "chosen_nll": means["chosen_nll"],
                "perplexity": math.exp(min(means["chosen_nll"], 50.0)),
                "pairs": int(pairs),
            }
            for key in ("loss", "reward_accuracy", "reward_margin", "chosen_nll"):
                self.log(f"val/{key}", self.last_validation[key], sync_dist=False)


@OBJECTIVES.register("dpo")
class DPOModule(PreferenceModule):
    loss_name = "dpo_loss"
    config_class = DPOSettings

    def __init__(self, model, tokenizer, cfg: DPOSettings):
        super().__init__(model, tokenizer, cfg)
        self.nll_weight = self.config.sft_weight
        self.beta, self.loss_type = self.config.beta, self.config.loss_type
        self.label_smoothing = self.config.label_smoothing
        self.precompute_ref = self.config.precompute_ref

    def on_models_built(self) -> None:
        super().on_models_built()
        # precomputed from the data once the model can run (precompute_reference); a live reference takes
        # the initial weights now
        self.reference = None if self.config.precompute_ref else live_reference(self.model, self.policy_builder())

    # -- reference --------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if self.model is not None:  # built: before the strategy wraps it
            self.precompute_reference()

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self.precompute_reference()  # deferred models: built in configure_model, partitioned by the engine now

    def precompute_reference(self) -> None:
        if not self.config.precompute_ref or self.reference is not None:
            return
        datamodule = self.trainer.datamodule
        if datamodule is None:
            raise ValueError("precompute_ref needs the trainer's datamodule (rpbench.training builds one)")
        loaders = datamodule.every_batch()  # a resumed run's place in its epoch stays where it was restored
        path = Path(self.config.ref_cache or Path(self.trainer.default_root_dir) / REFERENCE_CACHE_NAME)
        self.reference = PrecomputedReference.build(
            self.model,
            loaders,
            path,
            device=self.trainer.strategy.root_device,
            precision=str(self.trainer.precision),
            forward_context=self.trainer.precision_plugin.forward_context,
        )
        rank_zero_info(
            f"reference log-probs: {self.reference.computed} pairs computed, {self.reference.reused} read from {path}"
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        drop_reference_weights(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_reference_weights(self, checkpoint)

    # -- loss -------------------------------------------------------------------------------------
    def pair_terms(self, batch) -> dict[str, torch.Tensor]:
        """Per pair: DPO loss, implicit rewards, summed log-probs, and the chosen reply's per-token NLL."""
        n = len(batch["id"])
        logps, counts = self.policy_logps(batch)
        ref_logps = self.reference.sequence_logps(batch).to(logps.dtype)
        policy, reference = logps, ref_logps
        if self.config.loss_type == "ipo":  # IPO compares per-token mean log-probs
            policy, reference = logps / counts.clamp(min=1), ref_logps / counts.clamp(min=1)
        losses = dpo_loss(
            policy[:n],
            policy[n:],
            reference[:n],
            reference[n:],
            beta=self.config.beta,
            loss_type=self.config.loss_type,
            label_smoothing=self.config.label_smoothing,
        )
        return preference_terms(*losses, logps, counts)
