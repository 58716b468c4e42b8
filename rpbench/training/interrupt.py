"""Ctrl-C while training: the first stops the run at the end of the optimizer step under way, once
``checkpoints/last.ckpt`` holds it (no step lost, the epoch's position kept); a second stops it at once, the
last checkpoint written before it kept. Either ends training with ``TrainingInterrupted``."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from lightning.pytorch.callbacks import Callback

if TYPE_CHECKING:
    from rpbench.training.fit import LastCheckpoint


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C (SIGINT). ``checkpoint``: the one a re-run in the folder resumes (None: none
    was written), holding optimizer step ``step``."""

    def __init__(self, checkpoint: Path | None, step: int | None):
        held = f"{checkpoint.name} holds optimizer step {step}" if checkpoint else "no checkpoint was written"
        super().__init__(f"training interrupted: {held}")
        self.checkpoint, self.step = checkpoint, step


class StopOnInterrupt(Callback):
    """Stops training at the end of the optimizer step under way once ``request`` (the SIGINT handler) is
    called, after ``checkpoints`` wrote that step; every rank stops at the same step. A step that ends its
    epoch is not a stop: the epoch's validation and checkpoint come first, and the next step stops (or the
    end of training)."""

    def __init__(self, checkpoints: LastCheckpoint):
        self.checkpoints = checkpoints
        self.requested = False
        self.interrupted: TrainingInterrupted | None = None  # set once training ended on an interrupt
        self._step_at_batch_start = 0

    def request(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\nCtrl-C: training stops after the optimizer step under way, once checkpoints/last.ckpt holds it "
            "(Ctrl-C again stops at once, losing the steps since the last checkpoint)",
            file=sys.stderr,
            flush=True,
        )

    def held(self) -> TrainingInterrupted:
        """The interrupt, naming the last checkpoint written (if any) and its step."""
        path = self.checkpoints.last_model_path
        return TrainingInterrupted(Path(path) if path else None, self.checkpoints.saved_step if path else None)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self._step_at_batch_start:  # accumulating: the step is not over
            return
        requested = self.requested
        if trainer.world_size > 1:
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        if requested and not trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self.checkpoints.save_now(trainer)
            raise self.held()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            self.interrupted = exception if isinstance(exception, TrainingInterrupted) else self.held()


@contextmanager
def interruptible(stop: StopOnInterrupt) -> Iterator[None]:
    """SIGINT handled by ``stop`` while the block (``trainer.fit``) runs, then by the handler before it.
    Lightning exits on a KeyboardInterrupt (SystemExit 1): that becomes ``stop``'s TrainingInterrupted; a stop
    requested in the last step, which training ended with, is one too."""
    main = threading.current_thread() is threading.main_thread()  # signal handlers are the main thread's
    previous = signal.getsignal(signal.SIGINT) or signal.default_int_handler  # None: a handler not from Python
    if main:
        signal.signal(signal.SIGINT, stop.request)
    try:
        yield
    except SystemExit:
        if stop.interrupted is None:
            raise
        raise stop.interrupted from None
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)  # Lightning ignores SIGINT once it caught one
    if stop.requested:
        raise stop.held()
