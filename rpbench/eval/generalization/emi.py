"""Sampled CLUB mutual information with an LM critic, and EMI / EMID / R-EMI / R-EMID from it.

As in the authors' ``emi_utils.Structural_EMI.club_mi``: with ℓ(y | x) the critic's mean per-token
log-probability of y (length-normalised),

    MI(x; y) = mean_i ℓ(y_i | x_i) - mean_{(i, j) in N} ℓ(y_j | x_i),

where N is min(B(B-1), n_negatives) off-diagonal pairs (i != j) drawn uniformly without replacement
(seeded). EMI(split) = MI(x; model responses) - MI(x; golden responses); EMID(ID, OOD) =
EMI(ID) - EMI(OOD), positive when the model degrades under the shift. R-EMI / R-EMID are the same
numbers with the critic conditioned on a reasoning text r_i shared by every pair (i, ·):
ℓ(y_j | x_i, r_i). This module is the arithmetic; ``scoring`` computes the ℓ values with a model, only
for the pairs asked for.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch

PairScores = Callable[[Sequence[tuple[int, int]]], torch.Tensor]


def negative_pairs(n: int, n_negatives: int, seed: int) -> list[tuple[int, int]]:
    """min(n(n-1), n_negatives) distinct pairs (i, j), i != j, uniformly sampled with ``random.Random(seed)``.

    Pair number k enumerates i-major, j-minor, skipping the diagonal (the authors' ordering).
    """
    if n < 2:
        raise ValueError(f"CLUB needs at least 2 samples for off-diagonal negatives, got {n}")
    if n_negatives < 1:
        raise ValueError(f"n_negatives must be positive, got {n_negatives}")
    total = n * (n - 1)
    chosen = random.Random(seed).sample(range(total), min(total, n_negatives))
    return [(k // (n - 1), k % (n - 1) + (k % (n - 1) >= k // (n - 1))) for k in chosen]


def club_mi(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """mean(positive ℓ(y_i | x_i)) - mean(negative ℓ(y_j | x_i)); both 1-D and non-empty."""
    if positive.ndim != 1 or negative.ndim != 1 or not positive.numel() or not negative.numel():
        raise ValueError(
            f"expected non-empty 1-D log-probs, got shapes {tuple(positive.shape)}, {tuple(negative.shape)}"
        )
    return float(positive.double().mean() - negative.double().mean())


def sampled_club_mi(scorer: PairScores, rows: Sequence[int], n_negatives: int, seed: int) -> float:
    """CLUB MI over the samples ``rows``: ℓ(y_i | x_i) for each row against sampled off-diagonal pairs among them.

    ``scorer(pairs)`` returns ℓ(y_j | x_i) for (i, j) pairs (``scoring.PairScorer``, or a matrix lookup).
    """
    rows = list(rows)
    negatives = [(rows[i], rows[j]) for i, j in negative_pairs(len(rows), n_negatives, seed)]
    return club_mi(scorer([(r, r) for r in rows]), scorer(negatives))


def matrix_scores(logps: torch.Tensor) -> PairScores:
    """A scorer reading a full [n, n] matrix ``logps[i, j]`` = ℓ(y_j | x_i) (for tests and small splits)."""
    if logps.ndim != 2 or logps.shape[0] != logps.shape[1]:
        raise ValueError(f"expected a square [n, n] log-prob matrix, got {tuple(logps.shape)}")
    return lambda pairs: torch.stack([logps[i, j] for i, j in pairs]).double()
