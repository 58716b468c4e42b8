"""Lightning's DeepSpeed strategy, on GPUs or on CPU processes.

Lightning refuses DeepSpeed without CUDA. On ``trainer.accelerator=cpu`` rpbench runs DeepSpeed's own CPU
accelerator over gloo instead: the same ZeRO partitioning, gathering and engine code, so ZeRO-2/3 runs are
tested on machines without a GPU (and debugged on a laptop). Speed is not the point there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy


class CPUDeepSpeedStrategy(DeepSpeedStrategy):
    """DeepSpeed over gloo on CPU processes (DeepSpeed's CPU accelerator, chosen where no GPU is present
    or with ``DS_ACCELERATOR=cpu``)."""

    def __init__(self, config: Mapping[str, Any]):
        from deepspeed.accelerator import get_accelerator

        if get_accelerator().device_name() != "cpu":
            raise RuntimeError(
                "trainer.accelerator=cpu with DeepSpeed needs DeepSpeed's CPU accelerator: set DS_ACCELERATOR=cpu "
                f"(it chose {get_accelerator().device_name()!r})"
            )
        super().__init__(config=dict(config))

    @property
    def root_device(self) -> torch.device:
        return torch.device("cpu", self.local_rank)  # DeepSpeed reads the process's device index from it

    def setup_environment(self) -> None:
        DDPStrategy.setup_environment(self)  # skips DeepSpeedStrategy's CUDA check

    def setup_distributed(self) -> None:
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()


def deepspeed_strategy(config: Mapping[str, Any], accelerator: str) -> DeepSpeedStrategy:
    """The DeepSpeed strategy for ``trainer.accelerator``."""
    return CPUDeepSpeedStrategy(config) if accelerator == "cpu" else DeepSpeedStrategy(config=dict(config))
