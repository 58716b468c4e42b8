"""Critic log-probs ℓ(y | x [, r]) of responses under a causal LM, batched on the model's forward path.

A row is a critic context (chat turns: the pxy prompt of x, with r's core features for R-EMI; built by
the caller, ``rpbench.data.remid_prompts``) followed by a target (the response in the critic's target
layout) as an assistant turn, rendered by ``ChatRenderer``. Only the target's own tokens and its
end-of-turn token are scored (every earlier assistant span is masked). ℓ is the mean log-prob over that
span (length-normalised, as the authors' ``forward_single_gpu``). A row cut at ``max_length`` inside the
target is an error.

``conditional_entropy`` scores sampled responses (``SampledResponse``): a leading header of the sample (the
critic's target layout) is given as context, not scored, and a sample cut at the sampler's token limit is
scored without the end-of-turn token its sampler never wrote.

``PairScorer`` scores pairs (i, j) = ℓ(target_j | context_i) on demand and keeps every value it has
computed, so positives, sampled negatives and the subsamples of the convergence curve share forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from rpbench.data.chat import IGNORE_INDEX, ChatRenderer, Rendered
from rpbench.data.collate import pad_collate
from rpbench.data.records import Turn
from rpbench.models.forward import sequence_logps

Context = Sequence[Turn]


def response_row(
    renderer: ChatRenderer, context: Context, target: str, header: str = "", end_of_turn: bool = True
) -> Rendered:
    """``context`` + ``target`` with labels on the target's tokens after its leading ``header`` and, with
    ``end_of_turn``, its end-of-turn token."""
    if not target.startswith(header):
        raise ValueError(f"target {target[:60]!r} does not start with its header {header!r}")
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
    span = labels[start:end]
    first = _common_prefix(span, _encoded(renderer, header)) if header else 0
    last = len(span) if end_of_turn else _reply_tokens(renderer, span, target)
    if first >= last:
        raise ValueError(f"target {target[:60]!r}: no token to score after its header {header!r}")
    kept = [IGNORE_INDEX] * (start + first) + span[first:last] + [IGNORE_INDEX] * (len(labels) - start - last)
    return Rendered(rendered.input_ids, kept, rendered.dropped_turns, rendered.truncated)


def _encoded(renderer: ChatRenderer, text: str) -> list[int]:
    """``text``'s token ids as the renderer encodes a reply's content."""
    return renderer.content.encode(renderer.content.escape(text))


def _reply_tokens(renderer: ChatRenderer, span: Sequence[int], target: str) -> int:
    """How many of the rendered reply's tokens ``span`` are the target's own (the rest: the end of turn)."""
    body = _encoded(renderer, target)
    if list(span[: len(body)]) != body or len(body) == len(span):
        raise ValueError(f"target {target[:60]!r}: its tokens are not the rendered reply's before the end of turn")
    return len(body)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@torch.no_grad()
def row_logps(
    model: nn.Module, rows: Sequence[Rendered], pad: int, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """([R] float64 mean log-prob of each row's labelled tokens, [R] their counts), batched by length."""
    order = sorted(range(len(rows)), key=lambda k: len(rows[k].input_ids))
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


def _pad_id(renderer: ChatRenderer) -> int:
    return renderer.tokenizer.pad_token_id if renderer.tokenizer.pad_token_id is not None else 0


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
    return row_logps(model, rows, _pad_id(renderer), batch_size)


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


@dataclass(frozen=True)
class SampledResponse:
    """A response sampled for an entropy estimate, as it is scored."""

    text: str
    header: str  # the leading part of ``text`` given as context, not scored ("": none)
    ended: bool  # the sampler wrote its end-of-turn token (False: cut at its token limit; not scored then)


def conditional_entropy(
    model: nn.Module,
    renderer: ChatRenderer,
    contexts: Sequence[Context],
    samples: Sequence[Sequence[SampledResponse]],
    batch_size: int,
) -> torch.Tensor:
    """[n] Monte-Carlo H(p(· | x_i)) per token: -mean_k ℓ(samples[i][k] | contexts[i]), the samples drawn from
    ``model`` at temperature 1 with those contexts (the caller draws them); each sample scored after its header,
    with its end-of-turn token only when it ended."""
    if len(samples) != len(contexts):
        raise ValueError(f"{len(samples)} sample lists for {len(contexts)} contexts")
    rows, owners = [], []
    for i, drawn in enumerate(samples):
        if not drawn:
            raise ValueError(f"context {i}: no sampled responses for the entropy estimate")
        for y in drawn:
            rows.append(response_row(renderer, contexts[i], y.text, y.header, y.ended))
            owners.append(i)
    logps, _ = row_logps(model, rows, _pad_id(renderer), batch_size)
    owner = torch.tensor(owners)
    totals = torch.zeros(len(contexts), dtype=torch.float64).index_add(0, owner, logps)
    return -totals / torch.bincount(owner, minlength=len(contexts))
