"""Stop training at the first NaN/inf loss, before it reaches the weights or a checkpoint."""

from __future__ import annotations

import os

import torch
from lightning.pytorch.callbacks import Callback

from rpbench.core.errors import RpbenchError


class NonFiniteLossError(RpbenchError):
    """The training loss became NaN or infinite."""


class StopOnNonFiniteLoss(Callback):
    """Checks each loss before its backward pass (every rank agrees, so none waits on the others) and
    raises: checkpoints/last.ckpt stays the last one written from finite losses."""

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        bad = not bool(torch.isfinite(loss.detach()).all())
        if not trainer.strategy.reduce_boolean_decision(bad, all=False):
            return
        saver = trainer.checkpoint_callback
        kept = "no checkpoint had been written"
        if saver is not None and saver.last_model_path:  # named inside the run folder: no machine paths
            where = os.path.relpath(saver.last_model_path, trainer.default_root_dir)
            kept = f"{where} (step {saver._last_global_step_saved}) is kept"
        raise NonFiniteLossError(
            f"training stopped: the loss is {loss.detach().float().mean().item()} at optimizer step "
            f"{trainer.global_step} (epoch {trainer.current_epoch}, batch {trainer.fit_loop.batch_idx}); {kept}. "
            "Lower objective.lr, set objective.max_grad_norm, or check the data of that batch."
        )
