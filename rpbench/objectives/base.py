"""Shared LightningModule for every objective: optimizer, schedule, logging, held-out loss, HF export.

Subclasses implement ``training_step`` (and may override ``evaluation_nll``). Batches come from
rpbench.data.datamodule with a ``loss_scale`` that turns a micro-batch's summed loss into its share of
the global-batch mean (see rpbench.data.batching); ``backward_factor`` corrects it for a strategy whose
engine divides by the accumulation count again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import grad_norm
from transformers import get_scheduler

from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.models import save_hf
from rpbench.models.forward import supervised_nll_sum

NO_DECAY = ("bias", "norm.weight", "layernorm.weight", "ln_f.weight")


def is_deepspeed(strategy_name: str) -> bool:
    return "deepspeed" in strategy_name.lower()


def backward_loss_factor(strategy_name: str, grad_accum: int) -> int:
    """What a micro-batch loss scaled by ``loss_scale`` is multiplied by before Lightning's backward.

    ``loss_scale`` assumes the loss is divided by ``grad_accum`` once (Lightning's automatic optimisation)
    and gradients are averaged over ranks. DeepSpeed's engine divides by its gradient accumulation steps
    (= ``grad_accum``, set by Lightning) a second time, so there the loss is multiplied back by ``grad_accum``.
    """
    return grad_accum if is_deepspeed(strategy_name) else 1


class ObjectiveModule(L.LightningModule):
    """Subclasses set ``data_split`` (the data split they train on) and implement ``render`` and
    ``training_step``; ``collate`` and ``sample_weight`` default to padded token-level batches."""

    data_split = "train"
    supports_packing = False
    needs_tuned_start = False  # True: starting from a base or random-weight model is warned about

    @staticmethod
    def render(examples: Sequence, renderer: ChatRenderer) -> tuple[list[dict], list[str]]:
        """Rendered samples, and the ids of records left with nothing to train on (reported, not trained)."""
        raise NotImplementedError

    @staticmethod
    def collate(samples: list[dict], pad_token_id: int) -> dict:
        return pad_collate(samples, pad_token_id)

    @staticmethod
    def supervised_tokens(samples: Sequence[dict]) -> dict[str, int]:
        """Labelled tokens of rendered samples, as the run reports them (the first label is never one)."""
        return {"all": sum(label != IGNORE_INDEX for s in samples for label in s["labels"][1:])}

    @staticmethod
    def sample_weight(sample: dict) -> int:
        """A sample's share of the global-batch mean: its supervised tokens (the first label is never one)."""
        return sum(label != IGNORE_INDEX for label in sample["labels"][1:])

    def __init__(self, model, tokenizer, cfg: Mapping[str, Any]):
        super().__init__()
        self.model, self.tokenizer, self.cfg = model, tokenizer, dict(cfg)
        self._val_nll = self._val_tokens = None
        self._batch_started = 0.0
        self.backward_factor = 1  # set for the run's strategy in on_fit_start
        self.last_validation: dict[str, float] = {}

    # -- optimisation -----------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        self.backward_factor = backward_loss_factor(
            type(self.trainer.strategy).__name__, self.trainer.accumulate_grad_batches
        )

    def configure_optimizers(self):
        cfg = self.cfg
        decay, no_decay = [], []
        for name, param in self.model.named_parameters():
            if param.requires_grad:
                (no_decay if name.endswith(NO_DECAY) or param.ndim < 2 else decay).append(param)
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": float(cfg.get("weight_decay", 0.0))},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=float(cfg["lr"]),
            betas=tuple(cfg.get("adam_betas", (0.9, 0.999))),
            eps=float(cfg.get("adam_eps", 1e-8)),
        )
        total = self.planned_optimizer_steps()
        scheduler = get_scheduler(
            str(cfg.get("scheduler", "cosine")),
            optimizer,
            num_warmup_steps=math.ceil(float(cfg.get("warmup_ratio", 0.0)) * total),
            num_training_steps=total,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def planned_optimizer_steps(self) -> int:
        """The optimiser steps the learning-rate schedule spans."""
        return int(self.trainer.estimated_stepping_batches)

    def on_before_optimizer_step(self, optimizer) -> None:
        if not is_deepspeed(type(self.trainer.strategy).__name__):  # ZeRO shards the gradients
            norms = grad_norm(self.model, norm_type=2)
            if norms:
                self.log("train/grad_norm", norms["grad_2.0_norm_total"], rank_zero_only=True)
        self.log("train/lr", optimizer.param_groups[0]["lr"], rank_zero_only=True)

    # -- throughput -------------------------------------------------------------------------------
    def on_train_batch_start(self, batch, batch_idx) -> None:
        self._batch_started = time.perf_counter()

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        elapsed = time.perf_counter() - self._batch_started
        mask = batch.get("attention_mask")
        tokens = float(mask.sum() if mask is not None and mask.dim() == 2 else batch["input_ids"].numel())
        if elapsed > 0:
            self.log("train/tokens_per_s", tokens / elapsed, rank_zero_only=True)

    # -- held-out loss ----------------------------------------------------------------------------
    def evaluation_nll(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed NLL, supervised token count) of a validation micro-batch."""
        return supervised_nll_sum(self.model, batch)

    def on_validation_epoch_start(self) -> None:
        self._val_nll = torch.zeros((), device=self.device, dtype=torch.float64)
        self._val_tokens = torch.zeros((), device=self.device, dtype=torch.float64)

    def validation_step(self, batch, batch_idx) -> None:
        nll, tokens = self.evaluation_nll(batch)
        weight = float(batch["loss_scale"] > 0)  # repeated micro-batches that only even out ranks count 0
        self._val_nll += nll.detach().double() * weight
        self._val_tokens += float(tokens) * weight

    def on_validation_epoch_end(self) -> None:
        nll = self.trainer.strategy.reduce(self._val_nll, reduce_op="sum")
        tokens = self.trainer.strategy.reduce(self._val_tokens, reduce_op="sum")
        if tokens > 0:
            loss = float(nll / tokens)
            self.last_validation = {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "tokens": int(tokens)}
            self.log("val/loss", loss, sync_dist=False)
            self.log("val/perplexity", self.last_validation["perplexity"], sync_dist=False)

    # -- export -----------------------------------------------------------------------------------
    def export_hf(self, out_dir: str | Path, lora_adapter: bool = False) -> Path | None:
        """Save model + tokenizer in Hugging Face format from rank zero (ZeRO-3 weights gathered first);
        ``lora_adapter``: a LoRA model's adapter alone too, in ``<out_dir>/adapter``."""
        params = list(self.model.parameters())
        save = partial(save_hf, self.model, self.tokenizer, out_dir, lora_adapter=lora_adapter)
        if any(hasattr(p, "ds_id") for p in params):
            import deepspeed

            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                return save() if self.trainer.is_global_zero else None
        return save() if self.trainer.is_global_zero else None
