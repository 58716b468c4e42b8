"""Training progress in the log (step, loss, lr, ETA, peak GPU memory) and the loss-curve PNG."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

log = logging.getLogger(__name__)

CURVE_FILE = "loss_curve.png"
CURVE_SIZE_INCHES, CURVE_DPI = (10.0, 4.0), 100  # a 1000 x 400 pixel image
MARKED_POINTS = 30  # a series of this many points or fewer has a marker on each


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


class TrainingProgress(Callback):
    """Every ``trainer.log_every_n_steps`` optimizer steps (and at the last): a log line with the step,
    train loss, learning rate, elapsed time, ETA and (on CUDA) peak GPU memory. Keeps the points of the
    loss curve (train loss, lr, held-out loss) in the checkpoint, so a resumed run draws the whole curve."""

    def __init__(self):
        self.points: list[dict[str, float]] = []
        self._started = 0.0
        self._first_step = 0
        self._last_step = -1

    def on_train_start(self, trainer, pl_module) -> None:
        self._started, self._first_step = time.monotonic(), trainer.global_step
        self._last_step = trainer.global_step  # no line before the first optimizer step
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step, total = trainer.global_step, int(pl_module.planned_optimizer_steps())  # the objective's own count
        if step == self._last_step or (step % trainer.log_every_n_steps and step != total):
            return
        self._last_step = step
        metrics = trainer.callback_metrics
        point = {"step": step, **{k: float(metrics[f"train/{k}"]) for k in ("loss", "lr") if f"train/{k}" in metrics}}
        self.points.append(point)
        elapsed = time.monotonic() - self._started
        done = step - self._first_step
        eta = (total - step) * elapsed / done if done > 0 else float("nan")
        line = f"step {step}/{total}"
        if "loss" in point:
            line += f"  loss {point['loss']:.4f}"
        if "lr" in point:
            line += f"  lr {point['lr']:.2e}"
        line += f"  elapsed {_clock(elapsed)}  ETA {_clock(eta) if eta == eta else '?'}"
        if pl_module.device.type == "cuda":
            line += f"  peak GPU memory {torch.cuda.max_memory_allocated(pl_module.device) / 2**20:,.0f} MiB"
        if trainer.is_global_zero:
            log.info(line)

    def on_validation_end(self, trainer, pl_module) -> None:
        last = getattr(pl_module, "last_validation", None)
        if last and "loss" in last:
            self.points.append({"step": trainer.global_step, "held_out_loss": float(last["loss"])})

    def state_dict(self) -> dict[str, Any]:
        return {"points": self.points}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.points = list(state_dict["points"])


def plot_loss_curve(points: list[dict[str, float]], run_name: str, samples: tuple[int, int], path: Path) -> Path | None:
    """``loss_figure`` written to ``path``; None (nothing written) without a point."""
    if not any(key in p for p in points for key in ("loss", "held_out_loss", "lr")):
        return None
    loss_figure(points, run_name, samples).savefig(path, dpi=CURVE_DPI)
    return path


def loss_figure(points: list[dict[str, float]], run_name: str, samples: tuple[int, int]) -> Figure:
    """Train and held-out loss against the optimizer step (left) and the learning rate (right, the same steps),
    titled with the run's name and its (training, held-out) ``samples``; steps on whole-number ticks, and a
    marker on each point of a short series (a line of one point is not drawn)."""
    series = {key: [(p["step"], p[key]) for p in points if key in p] for key in ("loss", "held_out_loss", "lr")}
    fig = Figure(figsize=CURVE_SIZE_INCHES, layout="constrained")
    loss_ax, lr_ax = fig.subplots(1, 2, sharex=True)
    for ax, key, label, style in (
        (loss_ax, "loss", "train loss", "-"),
        (loss_ax, "held_out_loss", "held-out loss", "--"),
        (lr_ax, "lr", "learning rate", "-"),
    ):
        if series[key]:
            marker = "o" if key == "held_out_loss" or len(series[key]) <= MARKED_POINTS else None
            ax.plot(*zip(*series[key]), style, marker=marker, markersize=4, label=label)
    loss_ax.set(xlabel="optimizer step", ylabel="loss", title="loss")
    loss_ax.legend()
    lr_ax.set(xlabel="optimizer step", ylabel="learning rate", title="learning rate")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    loss_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    train, held_out = samples
    steps = max(p["step"] for p in points)
    fig.suptitle(f"{run_name}: {train} training samples, {held_out} held out, {steps:g} optimizer steps", fontsize=11)
    return fig
