"""The few collectives rpbench needs, safe without a process group (then rank 0 of 1)."""

from __future__ import annotations

from typing import Any

import torch


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def broadcast_from_zero(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (picklable objects)."""
    rank, world = rank_and_world()
    if world == 1:
        return obj
    holder = [obj if rank == 0 else None]
    torch.distributed.broadcast_object_list(holder, src=0)
    return holder[0]


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (picklable objects)."""
    _, world = rank_and_world()
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    torch.distributed.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if rank_and_world()[1] > 1:
        torch.distributed.barrier()
