"""The reference policy of DPO and GRPO: a frozen copy, the LoRA-disabled base, or log-probs cached on disk.

- :class:`FrozenCopy`: a deep copy of the initial policy, frozen, registered as a submodule of the
  LightningModule so it moves to the device with it. Its weights are left out of Lightning checkpoints
  (:func:`drop_reference_weights`): on resume the copy is rebuilt from the initial model, which is what
  the reference is. Under ZeRO-3 the policy is never whole on a rank, so there is nothing to copy: the
  reference is built again from the policy's config inside the engine's init context
  (:func:`live_reference` with ``build``), a :class:`FrozenModel` partitioned like the policy. As a frozen
  submodule of the engine (no optimiser state, no gradients; its layers gathered for each forward) it
  holds the same memory as a separate ZeRO-3 inference engine would, without a second engine to keep in
  step with Lightning's.
- :class:`DisabledAdapter`: the policy itself with its LoRA adapters switched off (peft
  ``disable_adapter()``): no second model in memory.
- :class:`PrecomputedReference`: per-sequence log-probs of every training and validation sample computed
  once, before training, and cached in a JSON file keyed by sample id (each entry carries a fingerprint of
  the sample's tokens, the file a signature of the reference weights and precision). Under DDP/DeepSpeed,
  rank 0 reads the cache and broadcasts it; each rank computes the missing samples of its own share of
  the batches; the results are gathered on every rank and rank 0 writes the file. No model needs to be
  kept in memory during training. A ZeRO-3-partitioned model computes them once the engine exists, every
  rank running the same forwards (a batch any rank lacks is computed on all), and its signature is read
  a gathered parameter at a time: the same as unpartitioned, so strategies share a cache.

Live references run under ``torch.no_grad``. A batch lays out ``R`` rows per sample in blocks: row
``k * n_samples + i`` is row ``k`` of sample ``i`` (DPO: chosen rows, then rejected rows).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rpbench.core.distributed import all_gather_objects, barrier, broadcast_from_zero, rank_and_world
from rpbench.core.errors import ConfigError
from rpbench.models.forward import sequence_logps
from rpbench.models.zero3 import gathered, is_partitioned

log = logging.getLogger(__name__)

REFERENCE_ATTRIBUTE = "reference"
CACHE_FORMAT = 1
SIGNATURE_VALUES_PER_TENSOR = 64


def is_peft_model(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


class FrozenModel(nn.Module):
    """A model frozen in eval mode; its weights stay out of checkpoints."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model.requires_grad_(False).eval()

    def train(self, mode: bool = True) -> FrozenModel:
        return super().train(False)

    @contextmanager
    def forward_model(self) -> Iterator[nn.Module]:
        with torch.no_grad():
            yield self.model

    def sequence_logps(self, batch: Mapping[str, Any]) -> torch.Tensor:
        with self.forward_model() as model:
            return sequence_logps(model, batch)[0]


class FrozenCopy(FrozenModel):
    """A frozen deep copy of the policy as it is now."""

    def __init__(self, policy: nn.Module):
        super().__init__(copy.deepcopy(policy))


class DisabledAdapter:
    """The peft policy with its adapters disabled: the base model it was initialised from."""

    def __init__(self, policy: nn.Module):
        if not is_peft_model(policy):
            raise TypeError(f"{type(policy).__name__} has no LoRA adapters to disable")
        self.policy = policy

    @contextmanager
    def forward_model(self) -> Iterator[nn.Module]:
        """The base in eval mode (no dropout) while the policy itself trains."""
        was_training = self.policy.training
        self.policy.eval()
        try:
            with torch.no_grad(), self.policy.disable_adapter():
                yield self.policy
        finally:
            self.policy.train(was_training)

    def sequence_logps(self, batch: Mapping[str, Any]) -> torch.Tensor:
        with self.forward_model() as model:
            return sequence_logps(model, batch)[0]


def live_reference(policy: nn.Module, build: Callable[[], nn.Module] | None = None) -> FrozenModel | DisabledAdapter:
    """The LoRA-disabled base for a peft policy; else the policy's initial weights, frozen: ``build()`` (the
    policy built again from its config: under ZeRO-3, partitioned like it) when given, else a deep copy."""
    if is_peft_model(policy):
        return DisabledAdapter(policy)
    return FrozenModel(build()) if build is not None else FrozenCopy(policy)


# -- checkpoints ----------------------------------------------------------------------------------------


def drop_reference_weights(checkpoint: dict[str, Any]) -> None:
    """Remove the frozen copy's weights from a Lightning checkpoint (they equal the initial model's)."""
    state = checkpoint.get("state_dict")
    if state is not None:
        for key in [k for k in state if k.startswith(f"{REFERENCE_ATTRIBUTE}.")]:
            del state[key]


def restore_reference_weights(module: nn.Module, checkpoint: dict[str, Any]) -> None:
    """Put the current frozen copy's weights into a checkpoint saved without them, before it is loaded."""
    reference = getattr(module, REFERENCE_ATTRIBUTE, None)
    state = checkpoint.get("state_dict")
    if isinstance(reference, FrozenModel) and state is not None:
        for key, value in reference.state_dict().items():
            state.setdefault(f"{REFERENCE_ATTRIBUTE}.{key}", value)


# -- precomputed ----------------------------------------------------------------------------------------


def sample_fingerprint(*token_lists: Sequence[int]) -> str:
    """Short hash of a sample's lists (input ids and labels of each of its rows, its image paths)."""
    return hashlib.sha1(json.dumps([list(t) for t in token_lists]).encode()).hexdigest()[:16]


def model_signature(model: nn.Module, precision: str) -> str:
    """Hash of parameter names, shapes, dtypes and a strided sample of their values, plus the precision.

    Cheap for any model size and exact (no floating-point reduction), so it is the same on every rank
    and every run for the same weights; a ZeRO-3-partitioned parameter is gathered for the time it is
    read (every rank must call this), which gives the signature of the same weights unpartitioned.
    """
    digest = hashlib.sha1(precision.encode())
    for name, param in model.named_parameters():
        with gathered([param]):
            flat = param.detach().reshape(-1)
            step = max(1, flat.numel() // SIGNATURE_VALUES_PER_TENSOR)
            digest.update(f"{name}:{tuple(param.shape)}:{param.dtype}".encode())
            digest.update(flat[::step][:SIGNATURE_VALUES_PER_TENSOR].float().cpu().numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    fingerprint: str
    logps: tuple[float, ...]  # one summed log-prob per row of the sample


def _read_cache(path: Path, signature: str) -> dict[str, CacheEntry]:
    """Entries of a cache file written for ``signature``; none when absent or written for other weights."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != CACHE_FORMAT or data.get("signature") != signature:
        log.warning("%s was computed for other reference weights or precision: recomputing", path)
        return {}
    return {sid: CacheEntry(e["fingerprint"], tuple(e["logps"])) for sid, e in data["entries"].items()}


def _write_cache(path: Path, signature: str, entries: Mapping[str, CacheEntry]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": CACHE_FORMAT,
        "signature": signature,
        "entries": {sid: {"fingerprint": e.fingerprint, "logps": list(e.logps)} for sid, e in entries.items()},
    }
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # left only when writing or replacing failed


def _batch_to(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class PrecomputedReference:
    """Reference log-probs looked up by sample id; built with :meth:`build`."""

    def __init__(self, entries: Mapping[str, CacheEntry], path: Path, computed: int, reused: int):
        self.entries, self.path = dict(entries), path
        self.computed, self.reused = computed, reused  # entries computed now / read from the file

    @classmethod
    def build(
        cls,
        model: nn.Module,
        batches: Iterable[Iterable[Mapping[str, Any]]],
        path: str | Path,
        device: torch.device,
        precision: str,
        forward_context=None,
    ) -> PrecomputedReference:
        """Load the cache at ``path`` and compute every sample it lacks from ``batches`` (this rank's loaders).

        Batches carry ``id`` and ``fingerprint`` lists (one per sample) and the padded rows; every rank
        must call this (it gathers). ``forward_context`` (e.g. the trainer's precision autocast) wraps
        each forward. A ZeRO-3-partitioned model needs every rank in each forward: all ranks run a batch
        when any of them lacks one of its samples (their loaders hold the same number of batches).
        Returns the reference, which counts the entries it computed and reused.
        """
        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"objective.ref_cache={path}: the cache is one file, got a folder (name a file in it)")
        lockstep = is_partitioned(model)
        if not lockstep:
            model.to(device)
        signature = model_signature(model, precision)
        rank, _ = rank_and_world()
        cached: dict[str, CacheEntry] = broadcast_from_zero(_read_cache(path, signature) if rank == 0 else None)
        found: dict[str, CacheEntry] = {}
        seen: set[str] = set()

        def known(sid: str, fingerprint: str) -> bool:
            entry = found.get(sid) or cached.get(sid)
            return entry is not None and entry.fingerprint == fingerprint

        was_training = model.training
        model.eval()
        try:
            for loader in batches:
                for batch in loader:
                    ids, fingerprints = batch["id"], batch["fingerprint"]
                    seen.update(ids)
                    missing = not all(known(s, f) for s, f in zip(ids, fingerprints, strict=True))
                    if not (any(all_gather_objects(missing)) if lockstep else missing):
                        continue
                    with torch.no_grad(), (forward_context or nullcontext)():
                        sums = sequence_logps(model, _batch_to(batch, device))[0].double().cpu()
                    rows = sums.view(-1, len(ids))  # [rows per sample, samples]
                    for i, (sid, fp) in enumerate(zip(ids, fingerprints, strict=True)):
                        found[sid] = CacheEntry(fp, tuple(rows[:, i].tolist()))
        finally:
            model.train(was_training)
        computed: dict[str, CacheEntry] = {}
        used: set[str] = set()
        for part, ids in all_gather_objects((found, seen)):
            computed.update(part)
            used |= ids
        reused = len(used - computed.keys())
        cached.update(computed)
        if rank == 0 and (computed or not path.is_file()):
            _write_cache(path, signature, cached)
        barrier()
        return cls(cached, path, computed=len(computed), reused=reused)

    def sequence_logps(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Summed reference log-prob of every row of ``batch``, in row order (blocks of samples)."""
        ids, fingerprints = batch["id"], batch["fingerprint"]
        entries = []
        for sid, fp in zip(ids, fingerprints, strict=True):
            entry = self.entries.get(sid)
            if entry is None or entry.fingerprint != fp:
                state = "missing from" if entry is None else "stale in"
                raise KeyError(
                    f"sample {sid!r} is {state} the reference cache {self.path}; it was computed for "
                    "other samples (delete the file to recompute)"
                )
            entries.append(entry.logps)
        values = [e[k] for k in range(len(entries[0])) for e in entries]
        return torch.tensor(values, dtype=torch.float32, device=batch["input_ids"].device)
