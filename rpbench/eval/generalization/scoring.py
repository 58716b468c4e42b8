"""Critic log-probs ℓ(y | x [, r]) of responses under a causal LM, batched on the model's forward path.

A row is a critic context (chat turns: the pxy prompt of x, with r's core features for R-EMI; built by
the caller, ``rpbench.data.remid_prompts``) followed by a target (the response in the critic's target
layout) as an assistant turn, rendered by ``ChatRenderer``. Only the target's own tokens and its
end-of-turn token are scored (every earlier assistant span is masked). ℓ is the mean log-prob over that
span (length-normalised, as the authors' ``forward_single_gpu``). A row cut at ``max_length`` inside the
target is an error.

``PairScorer`` scores pairs (i, j) = ℓ(target_j | context_i) on demand and keeps every value it has
computed, so positives, sampled negatives and the subsamples of the convergence curve share forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from rpbench.data.chat import IGNORE_INDEX, ChatRenderer, Rendered
from rpbench.data.collate import pad_collate
from rpbench.data.records import Turn
from rpbench.models.forward import sequence_logps

Context = Sequence[Turn]


def response_row(renderer: ChatRenderer, context: Context, target: str) -> Rendered:
    """``context`` + ``target`` with labels on the target's tokens and end-of-turn token only."""
    rendered = renderer.render_completion(context, target)
    labels = rendered.labels
    end = max((t + 1 for t, label in enumerate(labels) if label != IGNORE_INDEX), default=0)
    if rendered.truncated or end == 0:
        raise ValueError(
            f"target {target[:60]!r} does not fit in max_length={renderer.max_length} tokens after its context"
        )
    start = end
    while start > 0 and labels[start - 1] != IGNORE_INDEX:
        start -= 1
    kept = [IGNORE_INDEX] * start + labels[start:end] + [IGNORE_INDEX] * (len(labels) - end)
    return Rendered(rendered.input_ids, kept, rendered.dropped_turns, rendered.truncated)


@torch.no_grad()
def pair_logps(
    model: nn.Module,
    renderer: ChatRenderer,
    contexts: Sequence[Context],
    targets: Sequence[str],
    pairs: Sequence[tuple[int, int]],
    batch_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """([P] float64 ℓ(targets[j] | contexts[i]), [P] scored token counts) for each (i, j) in ``pairs``."""
    rows = [response_row(renderer, contexts[i], targets[j]) for i, j in pairs]
    order = sorted(range(len(rows)), key=lambda k: len(rows[k].input_ids))
    pad = renderer.tokenizer.pad_token_id if renderer.tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    sums = torch.zeros(len(rows), dtype=torch.float64)
    counts = torch.zeros(len(rows), dtype=torch.long)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = pad_collate([rows[k].as_sample() for k in chunk], pad, padding_side="right")
        batch = {key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}
        chunk_sums, chunk_counts = sequence_logps(model, batch)
        index = torch.tensor(chunk, dtype=torch.long)
        sums[index] = chunk_sums.double().cpu()
        counts[index] = chunk_counts.cpu()
    return sums / counts, counts


class PairScorer:
    """ℓ(targets[j] | contexts[i]) for pairs asked for, each computed once (module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        renderer: ChatRenderer,
        contexts: Sequence[Context],
        targets: Sequence[str],
        batch_size: int,
    ):
        if len(contexts) != len(targets):
            raise ValueError(f"{len(targets)} targets for {len(contexts)} contexts")
        self.model, self.renderer, self.batch_size = model, renderer, batch_size
        self.contexts, self.targets = list(contexts), list(targets)
        self.values: dict[tuple[int, int], float] = {}
        self.tokens: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self.contexts)

    def __call__(self, pairs: Sequence[tuple[int, int]]) -> torch.Tensor:
        """[P] float64 in the order of ``pairs``."""
        missing = list(dict.fromkeys(p for p in pairs if p not in self.values))
        if missing:
            logps, counts = pair_logps(self.model, self.renderer, self.contexts, self.targets, missing, self.batch_size)
            self.values.update(zip(missing, logps.tolist()))
            self.tokens.update(zip(missing, counts.tolist()))
        return torch.tensor([self.values[p] for p in pairs], dtype=torch.float64)

    def perplexity(self, rows: Sequence[int]) -> float:
        """exp(token-weighted mean NLL) of each row's own target: ppl of the targets given their contexts."""
        pairs = [(i, i) for i in rows]
        logps = self(pairs)
        tokens = torch.tensor([self.tokens[p] for p in pairs], dtype=torch.float64)
        return math.exp(-float((logps * tokens).sum() / tokens.sum()))


def conditional_entropy(
    model: nn.Module,
    renderer: ChatRenderer,
    contexts: Sequence[Context],
    samples: Sequence[Sequence[str]],
    batch_size: int,
) -> torch.Tensor:
    """[n] Monte-Carlo H(p(· | x_i)) per token: -mean_k ℓ(samples[i][k] | contexts[i]), the samples drawn from
    ``model`` at temperature 1 with those contexts (the caller draws them)."""
    if len(samples) != len(contexts):
        raise ValueError(f"{len(samples)} sample lists for {len(contexts)} contexts")
    flat, pairs = [], []
    for i, drawn in enumerate(samples):
        if not drawn:
            raise ValueError(f"context {i}: no sampled responses for the entropy estimate")
        for y in drawn:
            pairs.append((i, len(flat)))
            flat.append(y)
    logps, _ = pair_logps(model, renderer, contexts, flat, pairs, batch_size)
    owner = torch.tensor([i for i, _ in pairs])
    totals = torch.zeros(len(contexts), dtype=torch.float64).index_add(0, owner, logps)
    return -totals / torch.bincount(owner, minlength=len(contexts))
