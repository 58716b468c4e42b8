"""Shared LightningModule for every objective: optimizer, schedule, logging, held-out loss, HF export.

Subclasses implement ``training_step`` (and may override ``evaluation_nll``); what they make from the
models (a reference, stop ids...) they make in ``on_models_built``. The models arrive built, or as
``DeferredModel``s that ``configure_model`` builds: Lightning calls it inside the strategy's init context,
which under ZeRO-3 is ``deepspeed.zero.Init``, so a model is partitioned as it is created and never whole
on a rank (``train.zero3_init`` in the run's results records what each rank held). Batches come from
rpbench.data.datamodule with a ``loss_scale`` that turns a micro-batch's summed loss into its share of
the global-batch mean (see rpbench.data.batching); ``backward_factor`` corrects it for a strategy whose
engine divides by the accumulation count again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import grad_norm
from transformers import get_scheduler

from rpbench.core.distributed import all_gather_objects
from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.models import DeferredModel, save_hf
from rpbench.models.forward import supervised_nll_sum
from rpbench.models.loading import save_hf_partitioned
from rpbench.models.settings import ModelSettings
from rpbench.models.zero3 import full_numel, full_shape, held_numel, is_partitioned, transformers_see_zero3
from rpbench.objectives.config import ObjectiveSettings

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


def partition_report(module: torch.nn.Module) -> dict[str, Any]:
    """Whether every parameter of ``module`` is partitioned, its largest parameter and the largest part of a
    parameter each rank holds (every rank must call this)."""
    params = list(module.parameters())
    held = all_gather_objects(max(held_numel(p) for p in params))
    return {
        "partitioned": all(all_gather_objects(all(hasattr(p, "ds_id") for p in params))),
        "parameters": sum(full_numel(p) for p in params),
        "largest_parameter": max(full_numel(p) for p in params),
        "largest_held_per_rank": held,
    }


def offloads_optimizer(strategy) -> bool:
    """Whether a DeepSpeed strategy's config keeps the optimizer state off the device (ZeRO-Offload)."""
    config = getattr(strategy, "config", None) or {}
    offload = config.get("zero_optimization", {}).get("offload_optimizer") or {}
    return is_deepspeed(type(strategy).__name__) and offload.get("device", "none") != "none"


def adamw_class(strategy) -> Callable[..., torch.optim.Optimizer]:
    """AdamW; under ZeRO-Offload DeepSpeed's CPU AdamW (the same update, computed where the state lives)."""
    if offloads_optimizer(strategy):
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return partial(DeepSpeedCPUAdam, adamw_mode=True)
    return torch.optim.AdamW


class ObjectiveModule(L.LightningModule):
    """Subclasses set ``data_split`` (the data split they train on) and ``config_class`` (their typed
    settings), and implement ``render`` and ``training_step``; ``collate`` and ``sample_weight`` default to
    padded token-level batches.

    An objective may train several models: ``models_to_build`` names them (default: one, ``policy``), the
    pipeline loads each, and the module receives them as ``{name: model}`` / ``{name: tokenizer}``. The
    first is ``self.model`` (the one evaluated and probed); the others are ``self.extra_models``. All of
    them are optimised, checkpointed and exported (``model/``, or ``model/<name>/`` for several). Under
    ZeRO-3 the pipeline passes ``DeferredModel``s, built in ``configure_model``.
    """

    data_split = "train"
    supports_packing = False
    min_micro_batch = 1  # the fewest samples a micro-batch may hold (a smaller last one joins the one before)
    supports_images = True  # False: samples with images are refused (the objective cannot pass them on)
    needs_tuned_start = False  # True: starting from a base or random-weight model is warned about
    optimizer_count = 1  # optimizers stepped (a DeepSpeed engine steps one)
    opens_judges = False  # True: built with ``judges`` (a ClientOpener) for rewards that ask an LLM judge
    environments: tuple[str, ...] = ()  # the ``env`` options it rolls out in (built with the run's ``renderer``)
    record_types: tuple[type, ...] = ()  # the record types its ``render`` takes (checked when read); (): any
    config_class: type[ObjectiveSettings] = ObjectiveSettings

    @classmethod
    def models_to_build(cls, config: ObjectiveSettings, model: ModelSettings) -> dict[str, ModelSettings]:
        """Name -> model config of each model the objective trains; the first is the evaluated policy."""
        return {"policy": model}

    @staticmethod
    def render(examples: Sequence, renderer: ChatRenderer) -> tuple[list[dict], list[str]]:
        """Rendered samples, and the ids of records left with nothing to train on (reported, not trained)."""
        raise NotImplementedError

    @classmethod
    def render_for(
        cls, config: ObjectiveSettings, examples: Sequence, renderer: ChatRenderer
    ) -> tuple[list[dict], list[str]]:
        """``render`` under the run's objective settings; an objective whose rendering reads them overrides it."""
        return cls.render(examples, renderer)

    @staticmethod
    def collate(samples: list[dict], pad_token_id: int) -> dict:
        return pad_collate(samples, pad_token_id)

    @staticmethod
    def supervised_tokens(samples: Sequence[dict]) -> dict[str, int]:
        """Labelled tokens of rendered samples, as the run reports them (the first label is never one)."""
        return {"all": sum(label != IGNORE_INDEX for s in samples for label in s["labels"][1:])}

    @staticmethod
    def supervised_turns(samples: Sequence[dict]) -> int | None:
        """Assistant turns trained on in rendered samples, as the run reports them (None: the objective
        does not train on conversation turns)."""
        return None

    @staticmethod
    def sample_weight(sample: dict) -> int:
        """A sample's share of the global-batch mean: its supervised tokens (the first label is never one)."""
        return sum(label != IGNORE_INDEX for label in sample["labels"][1:])

    def __init__(self, model, tokenizer, cfg: ObjectiveSettings):
        """``model``/``tokenizer``: one model (the policy) or ``{name: ...}`` as ``models_to_build`` names them;
        ``cfg``: the objective's typed settings (an instance of its ``config_class``)."""
        super().__init__()
        models = dict(model) if isinstance(model, Mapping) else {"policy": model}
        tokenizers = dict(tokenizer) if isinstance(tokenizer, Mapping) else {name: tokenizer for name in models}
        self.model_names = list(models)
        self.tokenizer, self.tokenizers = tokenizers[self.model_names[0]], tokenizers
        if not isinstance(cfg, self.config_class):
            raise TypeError(f"{type(self).__name__} takes {self.config_class.__name__}, got {type(cfg).__name__}")
        self.config = cfg
        self._val_nll = self._val_tokens = None
        self._batch_started = 0.0
        self.backward_factor = 1  # set for the run's strategy in on_fit_start
        self.last_validation: dict[str, float] = {}
        self.zero3_init: dict[str, Any] | None = None  # what each rank held once its models were built
        deferred = [isinstance(m, DeferredModel) for m in models.values()]
        if any(deferred) and not all(deferred):
            raise ValueError("give the objective every model built, or every model as a DeferredModel")
        self.deferred: dict[str, DeferredModel] = models if all(deferred) else {}
        self.model = self.extra_models = None
        if not self.deferred:
            self._take_models(models)

    def _take_models(self, models: Mapping[str, torch.nn.Module]) -> None:
        first, *others = self.model_names
        self.model = models[first]
        self.extra_models = torch.nn.ModuleDict({name: models[name] for name in others}) if others else None
        self.on_models_built()

    def on_models_built(self) -> None:
        """Make what depends on the models (subclasses: a reference, stop ids...); called once they exist,
        from ``__init__`` or (deferred models) inside ``configure_model``'s init context. Reads ``self.config``,
        the models and tokenizers only: a subclass's own ``__init__`` may not have run yet."""

    def policy_builder(self) -> Callable[[], torch.nn.Module] | None:
        """What builds the policy again from its config (deferred models), for a reference with its initial
        weights; None when the policy came built (a reference then copies it)."""
        return self.deferred[self.model_names[0]].build if self.deferred else None

    def configure_model(self) -> None:
        """Build deferred models (Lightning calls this inside ``strategy.model_sharded_context()``: under
        ZeRO-3 each layer is partitioned as it is created, and transformers loads checkpoints into the shards)."""
        if self.model is not None:
            return
        strategy = self.trainer.strategy
        zero3 = bool(getattr(strategy, "zero_stage_3", False))
        with transformers_see_zero3(strategy.config) if zero3 else nullcontext():
            self._take_models({name: spec.build() for name, spec in self.deferred.items()})
        if zero3:
            self.zero3_init = partition_report(self)

    # -- optimisation -----------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        # from_pretrained leaves a model in eval mode and Lightning keeps module modes: train the trained
        # models with dropout on (a frozen reference copy is not among them and stays in eval)
        for model in self.named_models().values():
            model.train()
        self.backward_factor = backward_loss_factor(
            type(self.trainer.strategy).__name__, self.trainer.accumulate_grad_batches
        )

    def configure_optimizers(self):
        return self.optimizer_and_schedule(self.trained_parameters(), self.planned_optimizer_steps())

    def optimizer_and_schedule(self, named_parameters, total_steps: int) -> dict[str, Any]:
        """AdamW over the trainable ``(name, parameter)`` pairs (no decay on biases and norms) and the
        configured learning-rate schedule over ``total_steps`` optimiser steps."""
        cfg = self.config
        decay, no_decay = [], []
        for name, param in named_parameters:
            if param.requires_grad:
                (no_decay if name.endswith(NO_DECAY) or len(full_shape(param)) < 2 else decay).append(param)
        groups = [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        optimizer = adamw_class(self.trainer.strategy)(
            [group for group in groups if group["params"]],  # DeepSpeed's ZeRO optimizers refuse an empty group
            lr=cfg.lr,
            betas=cfg.adam_betas,
            eps=cfg.adam_eps,
        )
        scheduler = get_scheduler(
            cfg.scheduler,
            optimizer,
            num_warmup_steps=math.ceil(cfg.warmup_ratio * total_steps),
            num_training_steps=total_steps,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def named_models(self) -> dict[str, torch.nn.Module]:
        """Every model the objective trains, by name (``self.model`` first)."""
        return {self.model_names[0]: self.model, **(dict(self.extra_models) if self.extra_models else {})}

    def trained_parameters(self):
        """(name, parameter) of every trained model; names carry the model's name when there are several."""
        several = len(self.model_names) > 1
        for model_name, model in self.named_models().items():
            for name, param in model.named_parameters():
                yield (f"{model_name}.{name}" if several else name), param

    def planned_optimizer_steps(self) -> int:
        """The optimiser steps the learning-rate schedule spans."""
        return int(self.trainer.estimated_stepping_batches)

    def on_before_optimizer_step(self, optimizer) -> None:
        if not is_deepspeed(type(self.trainer.strategy).__name__):  # ZeRO shards the gradients
            norms = grad_norm(self.model if self.extra_models is None else self, norm_type=2)
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
        """Save each model + tokenizer in Hugging Face format from rank zero (ZeRO-3 weights gathered module
        by module, rpbench.models.zero3): to ``out_dir``, or ``out_dir/<name>`` each when the objective trains
        several; ``lora_adapter``: a LoRA model's adapter alone too, in ``<its folder>/adapter``."""
        models = self.named_models()
        for name, model in models.items():
            target = Path(out_dir) / name if len(models) > 1 else Path(out_dir)
            if is_partitioned(model):  # gathered module by module, kept on rank zero only
                write = self.trainer.is_global_zero
                save_hf_partitioned(model, self.tokenizers[name], target, write, lora_adapter=lora_adapter)
            elif self.trainer.is_global_zero:
                save_hf(model, self.tokenizers[name], target, lora_adapter=lora_adapter)
        self.trainer.strategy.barrier("export_hf")  # other ranks may reload the export next (ZeRO-3 evaluation)
        return Path(out_dir) if self.trainer.is_global_zero else None
