"""Stage 3: Lightning ``Trainer.fit`` of the configured objective on rendered records."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any
from weakref import proxy

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from rpbench.core.atomic import partial_path, publish
from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data.chat import ChatRenderer, ImageBudgetError
from rpbench.data.collate import pack_into_budget, packed_collate
from rpbench.data.datamodule import Collate, PlannedBatches, PlannedDataModule, epoch_batcher, fixed_order_batcher
from rpbench.data.settings import DataSettings
from rpbench.models import chat_renderer
from rpbench.models.vision import ImageError, is_image_text
from rpbench.models.zero3 import full_numel
from rpbench.objectives.registry import objective_class
from rpbench.scoring.chat.client import ClientOpener, open_client
from rpbench.training.cluster import cluster_plugins
from rpbench.training.deepspeed_strategy import deepspeed_strategy
from rpbench.training.interrupt import StopOnInterrupt, interruptible
from rpbench.training.nonfinite import StopOnNonFiniteLoss
from rpbench.training.progress import CURVE_FILE, TrainingProgress, plot_loss_curve
from rpbench.training.resume import last_checkpoint, write_settings
from rpbench.training.settings import TrainingSettings
from rpbench.training.trainer_settings import extra_callbacks, passed_options

log = logging.getLogger(__name__)


class ValidationHistory(Callback):
    """Held-out loss before training (the sanity pass over the whole validation set) and after each
    validation. Kept in the checkpoint, so a resumed run (which skips the sanity pass) reports the first
    run's "before"."""

    def __init__(self):
        self.history: list[dict[str, Any]] = []

    def on_validation_end(self, trainer, pl_module) -> None:
        if pl_module.last_validation:
            self.history.append({"step": trainer.global_step, **pl_module.last_validation})

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict["history"])


def stopped_on_max_steps(trainer) -> bool:
    """Whether ``trainer.max_steps`` is reached before the epoch's last batch."""
    cut_short = not trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
    return 0 <= trainer.max_steps <= trainer.global_step and cut_short


class LastCheckpoint(ModelCheckpoint):
    """``checkpoints/last.ckpt`` every ``every_n_steps`` optimizer steps (0: never mid-epoch), at each
    epoch end, and at the step ``trainer.max_steps`` stops training mid-epoch (instead of that epoch's end,
    which Lightning would resume at the next epoch: a larger ``max_steps`` continues the epoch), written to a
    temporary file and renamed over the previous one: a kill at any moment leaves the previous or the new
    checkpoint, whole."""

    def __init__(self, dirpath: Path, every_n_steps: int):
        super().__init__(
            dirpath=str(dirpath),
            save_last=True,
            save_top_k=0,
            every_n_train_steps=every_n_steps,
            enable_version_counter=False,
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if stopped_on_max_steps(trainer) and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """After the epoch's last step and its validation, even when a step checkpoint was just written
        (that one lacks the validation)."""
        if trainer.state.fn == TrainerFn.FITTING and not trainer.fast_dev_run and not stopped_on_max_steps(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    @property
    def saved_step(self) -> int | None:
        """The optimizer step of the checkpoint this run wrote last; None before it wrote one."""
        return self._last_global_step_saved if self._last_checkpoint_saved else None

    def save_now(self, trainer) -> None:
        """The last checkpoint at the current optimizer step, unless it holds that step already (every rank
        calls it)."""
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        partial = partial_path(filepath)
        trainer.save_checkpoint(partial, self.save_weights_only)
        if trainer.is_global_zero:
            publish(partial, filepath)
        trainer.strategy.barrier("LastCheckpoint")
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))


def _strategy(trainer_cfg: Mapping[str, Any], micro_batch_size: int):
    strategy = trainer_cfg["strategy"]
    if isinstance(strategy, Mapping):
        if strategy.get("name") != "deepspeed":
            raise ValueError(f"trainer.strategy: only 'deepspeed' takes a config, got {strategy.get('name')!r}")
        config = dict(strategy.get("config", {}))
        config.setdefault("train_micro_batch_size_per_gpu", micro_batch_size)
        return deepspeed_strategy(config, str(trainer_cfg["accelerator"]))
    return strategy


def zero_stage(trainer_cfg: Mapping[str, Any]) -> int:
    """The DeepSpeed ZeRO stage of a ``trainer`` config whose strategy is a DeepSpeed config; 0 otherwise."""
    strategy = trainer_cfg["strategy"]
    if not isinstance(strategy, Mapping):
        return 0
    return int(dict(strategy.get("config", {})).get("zero_optimization", {}).get("stage", 0))


def build_trainer(
    training: TrainingSettings, out_dir: Path, logger, callbacks: Sequence[Callback], resuming: bool = False
) -> L.Trainer:
    """The Trainer of ``training``; a resumed run skips the sanity validation (its "before" is in the
    checkpoint)."""
    trainer_cfg = training.trainer.as_dict()
    objective = training.objective
    micro_batch = 1 if objective.packing else int(objective.batch_size)
    grad_accum = int(objective.grad_accum)
    val_every = objective.val_every_n_steps
    if trainer_cfg.get("accelerator") == "gpu":
        torch.set_float32_matmul_precision("high")
    # Lightning's summary table prints "FLOPs 0" for models it cannot trace: log_parameters says it in one line.
    options = {"enable_model_summary": False, **passed_options(trainer_cfg)}
    if val_every:
        options["val_check_interval"] = int(val_every) * grad_accum
    return L.Trainer(
        **options,
        strategy=_strategy(trainer_cfg, micro_batch),
        max_epochs=int(objective.epochs),
        accumulate_grad_batches=grad_accum,
        gradient_clip_val=objective.max_grad_norm,
        log_every_n_steps=int(objective.log_every_n_steps),
        num_sanity_val_steps=0 if resuming else -1,
        use_distributed_sampler=False,
        default_root_dir=str(out_dir),
        logger=logger if logger is not None else False,
        callbacks=[*callbacks, *extra_callbacks(trainer_cfg)],
        plugins=cluster_plugins(),
    )


def with_image_inputs(collate: Collate, tokenizer) -> Collate:
    """``collate``, then the image inputs of the batch's images (its ``images``: one list per row, in row
    order) for an image-text model's tokenizer; ``collate`` itself otherwise."""
    if not is_image_text(tokenizer):
        return collate

    def collate_with_images(samples: list[dict]) -> dict:
        batch = collate(samples)
        paths = [path for row in batch["images"] for path in row]
        return {**batch, **tokenizer.model_image_inputs(batch["input_ids"], paths)}

    return collate_with_images


def build_datamodule(
    training: TrainingSettings, module_cls, train: list[dict], val: list[dict], tokenizer
) -> PlannedDataModule:
    """Planned train/val batches; the objective says how samples collate and what each weighs in the mean;
    an image-text model's batches carry their images' inputs."""
    objective, seed = training.objective, training.run.seed
    collate = with_image_inputs(partial(module_cls.collate, pad_token_id=tokenizer.pad_token_id), tokenizer)

    def weights(samples: list[dict]) -> list[int]:
        return [module_cls.sample_weight(s) for s in samples]

    if objective.packing:
        if not module_cls.supports_packing:
            raise ValueError(f"objective={objective.name} does not support packing: set objective.packing=false")
        budget = int(objective.max_tokens_per_batch)
        train_batcher = fixed_order_batcher(pack_into_budget([len(s["input_ids"]) for s in train], budget), seed)
        train_collate = packed_collate
    else:
        train_batcher = epoch_batcher(len(train), int(objective.batch_size), seed, min_size=module_cls.min_micro_batch)
        train_collate = collate
    val_batcher = epoch_batcher(len(val), int(objective.batch_size), seed, False, module_cls.min_micro_batch)
    return PlannedDataModule(
        PlannedBatches(train, train_collate, train_batcher, weights(train), int(objective.grad_accum)),
        PlannedBatches(val, collate, val_batcher, weights(val), 1) if val else None,
        num_workers=int(objective.num_workers),
    )


def log_parameters(module) -> None:
    """One line instead of Lightning's model summary table (frozen reference copies count as parameters)."""
    total = sum(full_numel(p) for p in module.parameters())
    trainable = sum(full_numel(p) for p in module.parameters() if p.requires_grad)
    log.info("%s: %s parameters, %s trainable", type(module).__name__, f"{total:,}", f"{trainable:,}")


class ParameterCount(Callback):
    """:func:`log_parameters` from rank zero once training starts (models deferred to ``configure_model``
    exist from then on)."""

    def on_fit_start(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            log_parameters(pl_module)


def resolve_ckpt(ckpt_path: str | None, out_dir: Path) -> str | None:
    """``last`` -> the run folder's last checkpoint if there is one (resume), else start fresh."""
    if ckpt_path == "last":
        last = last_checkpoint(out_dir)
        return str(last) if last.exists() else None
    return ckpt_path


def needs_final_validation(trainer: L.Trainer, history: ValidationHistory) -> bool:
    """Whether the held-out loss was last measured before the final optimizer step."""
    measured = bool(history.history) and history.history[-1]["step"] != trainer.global_step
    return measured and not trainer.fast_dev_run


def render_records(
    module_cls, config, examples: Sequence, renderer: ChatRenderer, source: str
) -> tuple[list[dict], list[str], dict[str, int]]:
    """The objective's ``render`` of each record, the ids of records left with nothing to train, and how many
    records were cut to ``data.max_length`` (``truncated``; ``cut_unevenly``: a pair with one reply cut and the
    other whole; ``history_dropped``: earlier turns left out to fit). An image that cannot be used (missing,
    unreadable, or with the system turn over the length budget) is a DataFormatError naming ``source``, the
    record and field."""
    samples, empty, cuts = [], [], dict.fromkeys(renderer.cuts, 0)
    for example in examples:
        before = dict(renderer.cuts)
        try:
            rendered, nothing = module_cls.render_for(config, [example], renderer)
        except (ImageError, ImageBudgetError) as error:
            raise DataFormatError(source, f"id {example.id!r}", "image", str(error)) from error
        samples += rendered
        empty += nothing
        for kind in cuts:
            cuts[kind] += renderer.cuts[kind] > before[kind]
    return samples, empty, cuts


def supervision_report(
    data: DataSettings, module_cls, train_samples: Sequence, val_samples: Sequence
) -> dict[str, Any]:
    """``data.supervise`` and ``data.speaker``, and the assistant turns trained on per split, for objectives
    that train on conversation turns (SFT)."""
    turns = {"train": module_cls.supervised_turns(train_samples), "val": module_cls.supervised_turns(val_samples)}
    if turns["train"] is None:
        return {}
    return {"supervision": {"supervise": data.supervise, "speaker": data.speaker, "turns": turns}}


def image_count(samples: Sequence[Mapping[str, Any]]) -> int:
    """The images the samples train on (each sample's ``images``)."""
    return sum(len(sample.get("images") or ()) for sample in samples)


def train(
    training: TrainingSettings,
    model,
    tokenizer,
    train_examples: list,
    val_examples: list,
    out_dir: Path,
    logger,
    judges: ClientOpener = open_client,
) -> dict[str, Any]:
    """Fit ``training.objective`` and return what the run reports (counts, held-out loss before/after).

    ``model``/``tokenizer``: the policy, or ``{name: ...}`` for each model the objective's ``models_to_build``
    names (the first one's tokenizer renders the data); ``judges`` opens the judges its rewards ask (the
    pipeline's has the local judge server handed in; the default serves no ``judge=local``)."""
    config, data = training.objective, training.data
    module_cls = objective_class(config.name)
    first = tokenizer if not isinstance(tokenizer, Mapping) else next(iter(tokenizer.values()))
    renderer = chat_renderer(training.model, first, data.max_length)
    source = f"data.files.{training.split} ({data.files[training.split]})"
    train_samples, train_empty, train_cuts = render_records(module_cls, config, train_examples, renderer, source)
    val_samples, val_empty, val_cuts = render_records(module_cls, config, val_examples, renderer, source)
    if not train_samples:
        raise ConfigError(
            f"no trainable samples: all {len(train_examples)} have no supervised token left "
            f"after truncation to data.max_length={data.max_length}"
        )
    images = {"train": image_count(train_samples), "val": image_count(val_samples)}
    if any(images.values()) and not module_cls.supports_images:
        raise ConfigError(
            f"objective={config.name} cannot train on images ({images['train']} in the training samples): "
            "choose objective=sft or dpo, or data.images=drop to train on the text alone"
        )
    datamodule = build_datamodule(training, module_cls, train_samples, val_samples, first)
    extras = {"judges": judges} if module_cls.opens_judges else {}
    extras |= {"renderer": renderer} if module_cls.environments else {}
    module = module_cls(model, tokenizer, config, **extras)
    history, progress = ValidationHistory(), TrainingProgress()
    checkpoints = LastCheckpoint(last_checkpoint(out_dir).parent, training.run.checkpoint_every_n_steps or 0)
    ckpt_path = resolve_ckpt(training.run.ckpt_path, out_dir)
    stop = StopOnInterrupt(checkpoints)
    callbacks = [history, progress, StopOnNonFiniteLoss(), checkpoints, ParameterCount(), stop]
    trainer = build_trainer(training, out_dir, logger, callbacks, resuming=ckpt_path is not None)
    if trainer.is_global_zero:  # what a re-run compares before it resumes (rpbench.training.resume)
        write_settings(training.fingerprint, last_checkpoint(out_dir).parent)
    # Lightning restores loader states only when they load before configure_optimizers: the datamodule
    # carries the position in the epoch instead (PlannedDataModule.state_dict), so this warning does not apply.
    warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")
    # Under manual optimisation (GRPO) a step checkpoint holds the state after the step it counts, as it should.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization and every_n_train_steps")
    with interruptible(stop):  # Ctrl-C: stops after the step under way, once last.ckpt holds it
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    if needs_final_validation(trainer, history):  # stopped between validations (e.g. on trainer.max_steps)
        trainer.validate(module, datamodule=datamodule, verbose=False)
    report: dict[str, Any] = {
        "samples": {
            "train": len(train_samples),
            "val": len(val_samples),
            "no_supervised_tokens": {
                "train": len(train_empty),
                "val": len(val_empty),
                "first_ids": (train_empty + val_empty)[:5],
            },
            "supervised_tokens": {
                "train": module_cls.supervised_tokens(train_samples),
                "val": module_cls.supervised_tokens(val_samples),
            },
            "images": images,
            **{kind: {"train": train_cuts[kind], "val": val_cuts[kind]} for kind in train_cuts},
        },
        **supervision_report(data, module_cls, train_samples, val_samples),
        "optimizer_steps": trainer.global_step,
        "epochs": trainer.current_epoch,
    }
    if module.zero3_init is not None:
        report["zero3_init"] = module.zero3_init
    counts = (len(train_samples), len(val_samples))
    if trainer.is_global_zero and plot_loss_curve(progress.points, training.run.run_name, counts, out_dir / CURVE_FILE):
        report["loss_curve"] = CURVE_FILE
    if history.history and history.history[0]["step"] == 0:  # fast_dev_run has no pass before training
        report["held_out"] = {"before": history.history[0], "after": history.history[-1]}
    if training.run.save_model:
        saved = module.export_hf(out_dir / "model", lora_adapter=training.export.lora_adapter)
        if saved is not None:
            report["model_dir"] = "model"
    return report
