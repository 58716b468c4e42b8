"""Critic log-probs ℓ(y | x [, r]) of responses under a causal LM, batched on the model's forward path.

A row is the prompt x (chat turns), optionally with a reasoning text r appended to its final user
turn under REASONING_HEADER (after the dialogue, where the authors' ``model_pxy`` prompt puts it),
followed by the response y as an assistant turn, rendered by ``ChatRenderer``. Only y's own tokens
and its end-of-turn token are scored: the renderer supervises every assistant turn, and every span
but the last (the context's earlier agent turns) is masked here. ℓ is the mean log-prob over that
span (length-normalised, as the authors' ``forward_single_gpu``). A row cut at ``max_length`` inside
y is an error; history dropped from the left to fit is counted in ``n_history_dropped``.
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
from rpbench.eval.generalization.emi import EMI, club_mi, emi_of, negative_pairs
from rpbench.models.forward import sequence_logps

REASONING_HEADER = "## Core Features of the Golden Response"
Prompt = Sequence[Turn]


def with_reasoning(prompt: Prompt, reasoning: str) -> tuple[Turn, ...]:
    """``prompt`` with ``reasoning`` appended to its final (user) turn in a fenced block under REASONING_HEADER."""
    if not prompt or prompt[-1].role != "user":
        raise ValueError("reasoning is appended to the final user turn; the prompt must end on a user turn")
    if not isinstance(reasoning, str) or not reasoning.strip():
        raise ValueError(f"reasoning must be a non-empty string, got {reasoning!r}")
    last = prompt[-1]
    block = f"{last.content}\n\n{REASONING_HEADER}\n```\n{reasoning}\n```"
    return (*prompt[:-1], Turn("user", block, last.image))


def response_row(renderer: ChatRenderer, prompt: Prompt, response: str) -> Rendered:
    """``prompt`` + ``response`` with labels on the response's tokens and end-of-turn token only."""
    rendered = renderer.render_completion(prompt, response)
    labels = rendered.labels
    end = max((t + 1 for t, label in enumerate(labels) if label != IGNORE_INDEX), default=0)
    if rendered.truncated or end == 0:
        raise ValueError(
            f"response {response[:60]!r} does not fit in max_length={renderer.max_length} tokens after its prompt"
        )
    start = end
    while start > 0 and labels[start - 1] != IGNORE_INDEX:
        start -= 1
    kept = [IGNORE_INDEX] * start + labels[start:end] + [IGNORE_INDEX] * (len(labels) - end)
    return Rendered(rendered.input_ids, kept, rendered.dropped_turns, rendered.truncated)


@dataclass(frozen=True)
class PairLogps:
    mean_logp: torch.Tensor  # [P] float64: ℓ(y_j | x_i [, r_i]) per pair, in the order given
    n_tokens: torch.Tensor  # [P] long: scored tokens per pair
    n_history_dropped: int  # pairs whose prompt lost history turns to fit max_length


def _prompts_with_reasoning(prompts: Sequence[Prompt], reasoning: Sequence[str] | None) -> list[Prompt]:
    if reasoning is None:
        return list(prompts)
    if len(reasoning) != len(prompts):
        raise ValueError(f"{len(reasoning)} reasoning texts for {len(prompts)} prompts")
    return [with_reasoning(p, r) for p, r in zip(prompts, reasoning)]


@torch.no_grad()
def pair_logps(
    model: nn.Module,
    renderer: ChatRenderer,
    prompts: Sequence[Prompt],
    responses: Sequence[str],
    pairs: Sequence[tuple[int, int]],
    reasoning: Sequence[str] | None = None,
    batch_size: int = 8,
) -> PairLogps:
    """ℓ(responses[j] | prompts[i] [, reasoning[i]]) for each (i, j) in ``pairs``; rows batched by length."""
    prompts = _prompts_with_reasoning(prompts, reasoning)
    rows = [response_row(renderer, prompts[i], responses[j]) for i, j in pairs]
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
        index = torch.tensor(chunk)
        sums[index] = chunk_sums.double().cpu()
        counts[index] = chunk_counts.cpu()
    return PairLogps(sums / counts, counts, sum(row.dropped_turns > 0 for row in rows))


def _check_lengths(prompts: Sequence[Prompt], **named: Sequence) -> None:
    for name, values in named.items():
        if len(values) != len(prompts):
            raise ValueError(f"{len(values)} {name} for {len(prompts)} prompts")


def club_mutual_information(
    model: nn.Module,
    renderer: ChatRenderer,
    prompts: Sequence[Prompt],
    responses: Sequence[str],
    reasoning: Sequence[str] | None = None,
    n_negatives: int = 1000,
    seed: int = 42,
    batch_size: int = 8,
) -> float:
    """Sampled CLUB MI(x; y) with ``model`` as the critic (``emi`` module docstring)."""
    _check_lengths(prompts, responses=responses)
    negatives = negative_pairs(len(prompts), n_negatives, seed)
    positives = [(i, i) for i in range(len(prompts))]
    scored = pair_logps(model, renderer, prompts, responses, positives + negatives, reasoning, batch_size).mean_logp
    return club_mi(scored[: len(positives)], scored[len(positives) :])


def estimate_emi(
    model: nn.Module,
    renderer: ChatRenderer,
    prompts: Sequence[Prompt],
    model_responses: Sequence[str],
    golden_responses: Sequence[str],
    reasoning: Sequence[str] | None = None,
    n_negatives: int = 1000,
    seed: int = 42,
    batch_size: int = 8,
) -> EMI:
    """EMI of one split (R-EMI when ``reasoning`` is given): MI(x; model responses) - MI(x; golden responses).

    Both MIs use the same negative pairs (one seed). The golden MI does not depend on the evaluated
    model: a caller scoring several models on one split may compute it once with
    ``club_mutual_information`` and combine with ``emi_of``.
    """
    _check_lengths(prompts, model_responses=model_responses, golden_responses=golden_responses)
    mi = [
        club_mutual_information(model, renderer, prompts, ys, reasoning, n_negatives, seed, batch_size)
        for ys in (model_responses, golden_responses)
    ]
    n_pairs = min(len(prompts) * (len(prompts) - 1), n_negatives)
    return emi_of(mi[0], mi[1], len(prompts), n_pairs, reasoning is not None)


def pair_logp_matrix(
    model: nn.Module,
    renderer: ChatRenderer,
    prompts: Sequence[Prompt],
    responses: Sequence[str],
    reasoning: Sequence[str] | None = None,
    batch_size: int = 8,
) -> torch.Tensor:
    """[n, n] float64 with [i, j] = ℓ(responses[j] | prompts[i] [, reasoning[i]]): every pair, for subsampling."""
    _check_lengths(prompts, responses=responses)
    n = len(prompts)
    pairs = [(i, j) for i in range(n) for j in range(n)]
    return pair_logps(model, renderer, prompts, responses, pairs, reasoning, batch_size).mean_logp.view(n, n)


def perplexity(
    model: nn.Module,
    renderer: ChatRenderer,
    prompts: Sequence[Prompt],
    responses: Sequence[str],
    reasoning: Sequence[str] | None = None,
    batch_size: int = 8,
) -> float:
    """exp(token-weighted mean NLL) of ``responses`` (e.g. golden ones) given their prompts [and reasoning]."""
    _check_lengths(prompts, responses=responses)
    scored = pair_logps(
        model, renderer, prompts, responses, [(i, i) for i in range(len(prompts))], reasoning, batch_size
    )
    return math.exp(-float((scored.mean_logp * scored.n_tokens).sum() / scored.n_tokens.sum()))


def conditional_entropy(
    model: nn.Module,
    renderer: ChatRenderer,
    prompts: Sequence[Prompt],
    samples: Sequence[Sequence[str]],
    reasoning: Sequence[str] | None = None,
    batch_size: int = 8,
) -> torch.Tensor:
    """[n] Monte-Carlo H(p(· | x_i)) per token: -mean_k ℓ(samples[i][k] | x_i), the samples drawn from ``model``.

    An estimate of the entropy rate (nats per token) only when ``samples[i]`` are the model's own
    samples at temperature 1; the caller draws them.
    """
    _check_lengths(prompts, samples=samples)
    flat, pairs = [], []
    for i, drawn in enumerate(samples):
        if not drawn:
            raise ValueError(f"prompt {i}: no sampled responses for the entropy estimate")
        for y in drawn:
            pairs.append((i, len(flat)))
            flat.append(y)
    scored = pair_logps(model, renderer, prompts, flat, pairs, reasoning, batch_size).mean_logp
    owner = torch.tensor([i for i, _ in pairs])
    totals = torch.zeros(len(prompts), dtype=torch.float64).index_add(0, owner, scored)
    return -totals / torch.bincount(owner, minlength=len(prompts))
