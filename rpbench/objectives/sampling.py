"""GRPO rollouts: each prompt repeated G times, sampled with the KV cache under no_grad (the model's own
``generate``, dynamic or static cache), or by an in-process vLLM engine synced to the policy's weights.

The repeat is local to a rank: the data plan gives every rank whole prompts (never the same prompt to two
ranks in a step), and each prompt's G completions are contiguous rows on that rank, so group statistics
need no communication. Sampling is seeded from ``(seed, step, rank)`` inside a forked RNG, so a resumed run
draws the same completions and the global RNG stream (dropout, shuffling) is untouched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from rpbench.data.chat import IGNORE_INDEX
from rpbench.models.generation import GenerationSettings, hf_generation_config, left_pad
from rpbench.models.vllm_engine import VLLMEngine
from rpbench.models.zero3 import gathered_for_generation

T = TypeVar("T")


def repeat_each(items: Sequence[T], times: int) -> list[T]:
    """``[a, b] -> [a, a, b, b]`` for ``times`` 2: the G completions of a prompt stay contiguous."""
    if times < 1:
        raise ValueError(f"times must be >= 1, got {times}")
    return [item for item in items for _ in range(times)]


def sampling_seed(seed: int, step: int, rank: int, world_size: int) -> int:
    """A distinct seed per (step, rank): ranks never draw the same stream, and a resumed run redraws it."""
    return seed + step * world_size + rank


@contextmanager
def generation_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode, no gradients, activation checkpointing off; everything restored afterwards.

    Checkpointing is switched off by clearing the ``gradient_checkpointing`` flag of the layers that have
    it set, so the configured checkpoint function (use_reentrant, offload, ...) is kept for training.
    """
    checkpointed = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    was_training = model.training
    for module in checkpointed:
        module.gradient_checkpointing = False
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
        for module in checkpointed:
            module.gradient_checkpointing = True


@dataclass
class Rollouts:
    """Completions of a generation batch, row ``i * G + j`` being completion ``j`` of prompt ``i``.

    ``policy_mask`` (an environment's multi-turn rollouts, e.g. whole sessions): which tokens of each
    completion the policy sampled, the only ones in the loss; None: every completion token. ``policy_turns``:
    which turn each of them belongs to (per-turn credit, ``rpbench.objectives.turn_credit``)."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]  # up to and including the first stop token
    truncated: list[bool]  # no stop token within max_new_tokens
    seconds: float
    policy_mask: list[list[bool]] | None = None
    policy_turns: list[list[int]] | None = None  # each token's character turn (0-based), -1 if not the policy's

    def policy_labels(self, row: int) -> list[int]:
        """Row ``row``'s completion with the tokens the policy did not sample set to IGNORE_INDEX."""
        ids = self.completion_ids[row]
        if self.policy_mask is None:
            return list(ids)
        return [t if own else IGNORE_INDEX for t, own in zip(ids, self.policy_mask[row], strict=True)]

    @property
    def policy_lengths(self) -> list[int]:
        """The policy's sampled tokens per row."""
        if self.policy_mask is None:
            return [len(c) for c in self.completion_ids]
        return [sum(mask) for mask in self.policy_mask]

    @property
    def n_tokens(self) -> int:
        return sum(self.policy_lengths)


def cut_at_stop(row: Sequence[int], stop_ids: Sequence[int]) -> tuple[list[int], bool]:
    """The generated tokens up to and including the first stop token, and whether none was found."""
    for i, token in enumerate(row):
        if token in stop_ids:
            return list(row[: i + 1]), False
    return list(row), True


# The objective keys rollout options are built from, by option (for error messages)
ROLLOUT_KEYS = {"max_new_tokens": "max_completion_length", "cache": "generation_cache"}


def rollout_options(
    *, max_new_tokens: int, temperature: float, top_p: float, top_k: int, cache: str, gather_per_batch: bool
) -> GenerationSettings:
    """How a policy's rollouts decode, from the objective's settings. The other options are not read by
    rollouts (``generate_rows``: one batch of prompt rows already cut to length, seeded and synced by the
    caller, no progress bar, nothing merged across ranks) and are set to say so."""
    return GenerationSettings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        repetition_penalty=1.0,  # rollouts sample the policy's own distribution (TRL's default)
        chat_template=None,  # the prompt rows are rendered by the caller
        generation_prompt=True,
        stop=(),
        reply_tag=None,
        cache=cache,
        gather_per_batch=gather_per_batch,
        max_prompt_length=None,
        batch_size=1,
        seed=0,
        synced_gpus=None,
        merge_timeout_s=1.0,
        progress=False,
    )


def sample_completions(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    num_generations: int,
    options: GenerationSettings,
    stop_ids: Sequence[int],
    pad_id: int,
    seed: int,
    synced_gpus: bool = False,
) -> Rollouts:
    """``num_generations`` sampled completions of each prompt (token ids, without padding)."""
    if not options.sampling:
        raise ValueError("GRPO needs sampled completions: set objective.temperature > 0")
    rows = repeat_each([list(p) for p in prompt_ids], num_generations)
    return generate_rows(model, rows, options, stop_ids, pad_id, seed, synced_gpus)


def generate_rows(
    model: nn.Module,
    rows: Sequence[Sequence[int]],
    options: GenerationSettings,
    stop_ids: Sequence[int],
    pad_id: int,
    seed: int,
    synced_gpus: bool = False,
) -> Rollouts:
    """One completion of each prompt row, greedy or sampled as ``options`` say (seeded in a forked RNG).
    On a ZeRO-3-partitioned model every rank must call it (it gathers the model, see ``gather_per_batch``)."""
    rows = [list(r) for r in rows]
    device = next(model.parameters()).device
    ids, mask = left_pad(rows, pad_id)
    config = hf_generation_config(options, stop_ids, pad_id)
    config.use_cache = True  # the KV cache, whatever the training config says (checkpointing turns it off)
    started = time.perf_counter()
    fork_devices: list[Any] = [device] if device.type == "cuda" else []
    gather = gathered_for_generation(model, options.gather_per_batch)  # ZeRO-3: once per batch, not per token
    with generation_mode(model), torch.random.fork_rng(devices=fork_devices), gather:
        torch.manual_seed(seed)
        out = model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config, synced_gpus=synced_gpus
        )
    seconds = time.perf_counter() - started
    cut = [cut_at_stop(row, stop_ids) for row in out[:, ids.shape[1] :].tolist()]
    return Rollouts(rows, [c for c, _ in cut], [t for _, t in cut], seconds)


def sample_with_engine(
    engine: VLLMEngine,
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    num_generations: int,
    options: GenerationSettings,
    stop_ids: Sequence[int],
    seed: int,
) -> Rollouts:
    """As :func:`sample_completions`, by a vLLM engine given the policy's current weights first (untested
    without a GPU)."""
    if not options.sampling:
        raise ValueError("GRPO needs sampled completions: set objective.temperature > 0")
    started = time.perf_counter()
    engine.sync_weights(model)
    rows = engine.generate_ids(prompt_ids, options, stop_ids, n=num_generations, seed=seed)
    return Rollouts(
        repeat_each([list(p) for p in prompt_ids], num_generations),
        [ids for ids, _ in rows],
        [truncated for _, truncated in rows],
        time.perf_counter() - started,
    )
