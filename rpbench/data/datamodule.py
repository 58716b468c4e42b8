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
        self.epoch = 0
        self.start = 0  # the micro-batch the next pass begins at (once: set when resuming mid-epoch)
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
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
    """Walks a PlannedBatches in order from its ``start``; Lightning calls ``set_epoch`` on it before each epoch."""

    def __init__(self, data: PlannedBatches):
        self.data = data

    def set_epoch(self, epoch: int) -> None:
        self.data.set_epoch(epoch)

    def __iter__(self):
        start, self.data.start = self.data.start, 0
        return iter(range(start, len(self.data)))

    def __len__(self) -> int:
        return len(self.data)


class CountingLoader(DataLoader):
    """A loader over PlannedBatches that counts the micro-batches of the epoch it has delivered."""

    def __init__(self, data: PlannedBatches, num_workers: int):
        super().__init__(data, batch_size=None, sampler=_EpochSampler(data), num_workers=num_workers)
        self.delivered = 0

    def __iter__(self):
        self.delivered = self.dataset.start
        for batch in super().__iter__():
            self.delivered += 1
            yield batch


class PlannedDataModule(L.LightningDataModule):
    """Train and validation loaders from ready-made PlannedBatches; shards them by the trainer's rank."""

    def __init__(self, train: PlannedBatches, val: PlannedBatches | None, num_workers: int = 0):
        super().__init__()
        self.train, self.val, self.num_workers = train, val, num_workers
        self.train_loader: CountingLoader | None = None

    def state_dict(self) -> dict[str, int]:
        """Saved in Lightning checkpoints: the epoch and how many of its micro-batches training has had."""
        delivered = self.train_loader.delivered if self.train_loader is not None else 0
        return {"epoch": self.train.epoch, "delivered": delivered}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume after the delivered micro-batches of the saved epoch (a finished epoch: at the next one's
        start), so a resumed run trains on exactly the batches an uninterrupted one would."""
        self.train.set_epoch(int(state["epoch"]))
        delivered = int(state["delivered"])
        self.train.start = delivered if delivered < len(self.train) else 0

    def setup(self, stage: str | None = None) -> None:
        if self.trainer is not None:
            for data in (self.train, self.val):
                if data is not None:
                    data.shard(self.trainer.global_rank, self.trainer.world_size)

    def every_batch(self) -> list[DataLoader]:
        """This rank's train and validation micro-batches of the current epoch, each from the first, for a pass
        before training (e.g. reference log-probs): the position a resumed epoch starts at is left as it is."""
        datas = [data for data in (self.train, self.val) if data is not None]
        return [
            DataLoader(data, batch_size=None, sampler=range(len(data)), num_workers=self.num_workers) for data in datas
        ]

    def _loader(self, data: PlannedBatches) -> DataLoader:
        return DataLoader(data, batch_size=None, sampler=_EpochSampler(data), num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        self.train_loader = CountingLoader(self.train, self.num_workers)
        return self.train_loader

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val) if self.val is not None else []


def epoch_batcher(n: int, batch_size: int, seed: int, shuffle: bool = True, min_size: int = 1) -> Batcher:
    """Fixed-size micro-batches, reshuffled every epoch (a last one under ``min_size`` joins the one before)."""
    shuffled_chunks(n, batch_size, seed, shuffle, min_size)  # too few samples: refused now, not mid-epoch
    return lambda epoch: shuffled_chunks(n, batch_size, seed + epoch, shuffle, min_size)


def fixed_order_batcher(batches: list[list[int]], seed: int, shuffle: bool = True) -> Batcher:
    """Pre-built micro-batches (e.g. packed token budgets) in a per-epoch shuffled order."""

    def batcher(epoch: int) -> list[list[int]]:
        order = list(batches)
        if shuffle:
            random.Random(seed + epoch).shuffle(order)
        return order

    return batcher
