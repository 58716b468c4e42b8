"""Models under DeepSpeed ZeRO-3: built partitioned, read a parameter at a time.

Under ``trainer=deepspeed_zero3`` the trained models are not loaded before training: the objective gets a
``DeferredModel`` per model (rpbench.models.loading) and builds it in Lightning's ``configure_model``,
inside ``deepspeed.zero.Init``, while :func:`transformers_see_zero3` tells transformers so.
``from_pretrained`` then creates every layer partitioned and copies the checkpoint's tensors into the
shards (rank 0 reads them), and a tiny model built from a config is initialised module by module on rank 0
(rpbench.models.tiny): no rank holds the whole model.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

from torch import nn


def is_partitioned(model: nn.Module) -> bool:
    """Whether ZeRO-3 has partitioned ``model``'s parameters (each rank holds a shard)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def gathered(params: Iterable[nn.Parameter]):
    """A context in which ZeRO-3-partitioned ``params`` are whole on every rank (read only); every rank must
    enter it with the same parameters. A no-op for parameters that are not partitioned."""
    params = [p for p in params if hasattr(p, "ds_id")]
    if not params:
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def full_shape(param: nn.Parameter) -> tuple[int, ...]:
    """The parameter's shape, also when partitioned (its local tensor is then empty)."""
    return tuple(getattr(param, "ds_shape", param.shape))


def full_numel(param: nn.Parameter) -> int:
    """The parameter's element count, also when partitioned."""
    return int(getattr(param, "ds_numel", param.numel()))


def held_numel(param: nn.Parameter) -> int:
    """The elements of the parameter this rank holds: its shard when partitioned."""
    shard = getattr(param, "ds_tensor", None)
    return param.numel() + (shard.numel() if shard is not None else 0)


@contextmanager
def transformers_see_zero3(config: Mapping[str, Any]) -> Iterator[None]:
    """While inside, transformers builds models for ZeRO-3 (``is_deepspeed_zero3_enabled()``): partitioned
    at creation, checkpoints loaded into the shards. Left before evaluation, which loads whole models."""
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    seen = HfDeepSpeedConfig(dict(config))  # transformers keeps a weak reference: alive until the end
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        del seen
