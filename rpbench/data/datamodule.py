"""LightningDataModule over rendered samples, driven by optimizer-step plans (see batching.py)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from rpbench.data.batching import MicroBatch, plan_steps, shuffled_chunks

Collate = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]
Batcher = Callable[[int], list[list[int]]]  # epoch -> global list of micro-batches (sample indices)


class PlannedBatches(Dataset):
    """Item k is this rank's k-th micro-batch of the current epoch, collated, with its ``loss_scale``."""

    def __init__(
        self,
        samples: Sequence[dict[str, Any]],
        collate: Collate,
        batcher: Batcher,
        tokens: Sequence[int],
        grad_accum: int,
    ):
        self.samples, self.collate, self.batcher, self.tokens = samples, collate, batcher, tokens
        self.grad_accum = grad_accum
        self.rank, self.world_size = 0, 1
        self.plan: list[MicroBatch] = []
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.plan = plan_steps(
            self.batcher(epoch), self.tokens, world_size=self.world_size, grad_accum=self.grad_accum, rank=self.rank
        )

    def shard(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.set_epoch(0)

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        micro = self.plan[k]
        batch = self.collate([self.samples[i] for i in micro.indices])
        batch["loss_scale"] = torch.tensor(micro.loss_scale, dtype=torch.float32)
        return batch


class _EpochSampler(Sampler[int]):
    """Walks a PlannedBatches in order; Lightning calls ``set_epoch`` on it before each epoch."""

    def __init__(self, data: PlannedBatches):
        self.data = data

    def set_epoch(self, epoch: int) -> None:
        self.data.set_epoch(epoch)

    def __iter__(self):
        return iter(range(len(self.data)))

    def __len__(self) -> int:
        return len(self.data)


class PlannedDataModule(L.LightningDataModule):
    """Train and validation loaders from ready-made PlannedBatches; shards them by the trainer's rank."""

    def __init__(self, train: PlannedBatches, val: PlannedBatches | None, num_workers: int = 0):
        super().__init__()
        self.train, self.val, self.num_workers = train, val, num_workers

    def setup(self, stage: str | None = None) -> None:
        if self.trainer is not None:
            for data in (self.train, self.val):
                if data is not None:
                    data.shard(self.trainer.global_rank, self.trainer.world_size)

    def _loader(self, data: PlannedBatches) -> DataLoader:
        return DataLoader(data, batch_size=None, sampler=_EpochSampler(data), num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val) if self.val is not None else []


def epoch_batcher(n: int, batch_size: int, seed: int, shuffle: bool = True) -> Batcher:
    """Fixed-size micro-batches, reshuffled every epoch."""
    return lambda epoch: shuffled_chunks(n, batch_size, seed + epoch, shuffle)


def fixed_order_batcher(batches: list[list[int]], seed: int, shuffle: bool = True) -> Batcher:
    """Pre-built micro-batches (e.g. packed token budgets) in a per-epoch shuffled order."""

    def batcher(epoch: int) -> list[list[int]]:
        order = list(batches)
        if shuffle:
            random.Random(seed + epoch).shuffle(order)
        return order

    return batcher
