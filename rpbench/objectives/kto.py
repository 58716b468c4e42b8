"""KTO (Ethayarajh et al., 2024): completions labelled desirable or undesirable, no pairs (``data.files.labelled``,
prompt/completion/label records of ``data=custom``).

A micro-batch of B completions is one forward of 2B rows: the B completions after their prompts (only the
completion labelled), then B mismatched rows, each prompt followed by the previous sample's completion (TRL's
rotation by one within a batch: ``(x_1, y_B), (x_2, y_1), ...``), whose mean policy/reference log-ratio is the
KL reference point (``losses.kto_kl``: averaged over ranks, then clamped at 0). The loss is the mean of
``losses.kto_loss`` over every completion of the global batch. The reference is live (a frozen copy, or the
LoRA-disabled base): the mismatched rows depend on the batch the sampler draws, so their reference log-probs
cannot be cached per sample. A micro-batch of one sample would pair its prompt with its own completion (the KL
estimate then its own log-ratio): ``batch_size`` must be >= 2 (TRL refuses 1 too), a last micro-batch of one
joins the one before it (``min_micro_batch``), and ``collate`` refuses a batch of one.

Validation on held-out completions reports the KTO loss, the mean implicit rewards of the desirable and the
undesirable completions, and the KL estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rpbench.core.typed import Problem
from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.data.records import LabelledExample
from rpbench.models.forward import sequence_logps
from rpbench.objectives.base import ObjectiveModule
from rpbench.objectives.config import ObjectiveSettings, once_per_key
from rpbench.objectives.losses import kto_kl, kto_loss
from rpbench.objectives.reference import drop_reference_weights, live_reference, restore_reference_weights
from rpbench.objectives.registry import OBJECTIVES

VALIDATION_SUMS = ("loss", "desirable_rewards", "desirable", "undesirable_rewards", "undesirable", "kl", "batches")


@dataclass(frozen=True, kw_only=True)
class KTOSettings(ObjectiveSettings):
    """conf/objective/kto.yaml."""

    beta: float
    desirable_weight: float
    undesirable_weight: float

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.batch_size < 2:  # in place of the shared rule (>= 1)
            found.append(("batch_size", "an integer >= 2 (the KL estimate pairs prompts with other samples' replies)"))
        if not self.beta > 0:
            found.append(("beta", "a number > 0"))
        for key in ("desirable_weight", "undesirable_weight"):
            if getattr(self, key) < 0:
                found.append((key, "a number >= 0"))
        return once_per_key(found, super().problems())


@OBJECTIVES.register("kto")
class KTOModule(ObjectiveModule):
    data_split = "labelled"
    needs_tuned_start = True
    supports_packing = False
    min_micro_batch = 2  # the KL pairs need another sample's completion
    record_types = (LabelledExample,)
    config_class = KTOSettings

    @staticmethod
    def render(examples: Sequence[LabelledExample], renderer: ChatRenderer) -> tuple[list[dict], list[str]]:
        """One sample per completion (prompt fitted with it; only the completion labelled), with where its
        prompt ends; completions with no token left are reported."""
        samples, empty = [], []
        for example in examples:
            row = renderer.render_completion(example.prompt, example.completion)
            if not row.n_supervised:
                empty.append(example.id)
                continue
            prompt_length = next(i for i, label in enumerate(row.labels) if label != IGNORE_INDEX)
            samples.append(
                {
                    **row.as_sample(),
                    "id": example.id,
                    "desirable": example.desirable,
                    "prompt_length": prompt_length,
                    "max_length": renderer.max_length,
                }
            )
        return samples, empty

    @staticmethod
    def collate(samples: list[dict], pad_token_id: int) -> dict:
        """Rows ``0..B-1``: the samples; rows ``B..2B-1``: prompt ``i`` followed by completion ``i - 1`` (the
        last one's for the first), cut to the length budget. A batch of one has no other completion: refused."""
        if len(samples) < 2:
            raise ValueError("a KTO micro-batch needs at least 2 completions: the KL pairs each prompt with another's")
        mismatched = []
        for i, sample in enumerate(samples):
            other = samples[i - 1]
            start, other_start = sample["prompt_length"], other["prompt_length"]
            ids = (sample["input_ids"][:start] + other["input_ids"][other_start:])[: sample["max_length"]]
            labels = ([IGNORE_INDEX] * start + other["input_ids"][other_start:])[: sample["max_length"]]
            mismatched.append({"input_ids": ids, "labels": labels})
        rows = [{"input_ids": s["input_ids"], "labels": s["labels"]} for s in samples] + mismatched
        batch = pad_collate(rows, pad_token_id)
        batch["id"] = [s["id"] for s in samples]
        batch["desirable"] = torch.tensor([s["desirable"] for s in samples])
        batch["images"] = [s["images"] for s in samples] * 2
        return batch

    @staticmethod
    def supervised_tokens(samples: Sequence[dict]) -> dict[str, int]:
        """Completion tokens labelled, desirable and undesirable apart."""
        return {
            kind: sum(label != IGNORE_INDEX for s in samples if s["desirable"] == wanted for label in s["labels"][1:])
            for kind, wanted in (("desirable", True), ("undesirable", False))
        }

    @staticmethod
    def sample_weight(sample: dict) -> int:
        """Every completion weighs the same in the global-batch mean."""
        return 1

    def __init__(self, model, tokenizer, cfg: KTOSettings):
        super().__init__(model, tokenizer, cfg)
        self._val_sums: torch.Tensor | None = None

    def on_models_built(self) -> None:
        self.reference = live_reference(self.model, self.policy_builder())

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        drop_reference_weights(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_reference_weights(self, checkpoint)

    # -- loss -------------------------------------------------------------------------------------
    def completion_terms(self, batch) -> dict[str, torch.Tensor]:
        """Per completion: KTO loss and implicit reward; and the batch's KL reference point."""
        n = len(batch["id"])
        logps, _ = sequence_logps(self.model, batch)
        ref_logps = self.reference.sequence_logps(batch).to(logps.dtype)
        kl = self._mean_over_ranks(kto_kl(logps[n:], ref_logps[n:]))
        losses, rewards = kto_loss(
            logps[:n],
            ref_logps[:n],
            batch["desirable"].to(logps.device),
            kl,
            beta=self.config.beta,
            desirable_weight=self.config.desirable_weight,
            undesirable_weight=self.config.undesirable_weight,
        )
        return {"losses": losses, "rewards": rewards, "kl": kl.clamp(min=0)}

    def _mean_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        if self._trainer is None or self.trainer.world_size == 1:
            return value
        return self.trainer.strategy.reduce(value, reduce_op="mean")

    def training_step(self, batch, batch_idx):
        terms = self.completion_terms(batch)
        if batch["loss_scale"] > 0:  # repeated micro-batches that only even out ranks are not logged
            desirable = batch["desirable"].to(terms["rewards"].device)
            metrics = {"train/kl": terms["kl"]}
            for kind, mask in (("desirable", desirable), ("undesirable", ~desirable)):
                if mask.any():
                    metrics[f"train/rewards/{kind}"] = terms["rewards"][mask].mean()
            self.log("train/loss", terms["losses"].detach().mean(), prog_bar=True, rank_zero_only=True)
            self.log_dict(metrics, rank_zero_only=True)
        return terms["losses"].sum() * batch["loss_scale"] * self.backward_factor

    # -- held-out completions ---------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(len(VALIDATION_SUMS), device=self.device, dtype=torch.float64)

    def validation_step(self, batch, batch_idx) -> None:
        terms = self.completion_terms(batch)
        desirable = batch["desirable"].to(terms["rewards"].device)
        rewards = terms["rewards"]
        sums = [
            terms["losses"].sum(),
            rewards[desirable].sum(),
            desirable.sum(),
            rewards[~desirable].sum(),
            (~desirable).sum(),
            terms["kl"],
            torch.ones((), device=rewards.device),
        ]
        live = float(batch["loss_scale"] > 0)
        self._val_sums += torch.stack([s.double() for s in sums]) * live

    def on_validation_epoch_end(self) -> None:
        totals = self.trainer.strategy.reduce(self._val_sums, reduce_op="sum").tolist()
        sums = dict(zip(VALIDATION_SUMS, totals, strict=True))
        completions = sums["desirable"] + sums["undesirable"]
        if completions > 0:
            self.last_validation = {
                "loss": sums["loss"] / completions,
                "desirable_rewards": sums["desirable_rewards"] / max(sums["desirable"], 1),
                "undesirable_rewards": sums["undesirable_rewards"] / max(sums["undesirable"], 1),
                "kl": sums["kl"] / max(sums["batches"], 1),
                "completions": int(completions),
            }
            for key in ("loss", "desirable_rewards", "undesirable_rewards", "kl"):
                self.log(f"val/{key}", self.last_validation[key], sync_dist=False)
