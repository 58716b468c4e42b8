"""Sampled CLUB mutual information with an LM critic, and EMI / EMID / R-EMI / R-EMID from it.

As in the authors' ``emi_utils.Structural_EMI.club_mi``: with ℓ(y | x) the critic's mean per-token
log-probability of y (length-normalised),

    MI(x; y) = mean_i ℓ(y_i | x_i) - mean_{(i, j) in N} ℓ(y_j | x_i),

where N is min(B(B-1), n_negatives) off-diagonal pairs (i != j) drawn uniformly without replacement
(seeded). EMI(split) = MI(x; model responses) - MI(x; golden responses); EMID(ID, OOD) =
EMI(ID) - EMI(OOD), positive when the model degrades under the shift. R-EMI / R-EMID are the same
numbers with the critic conditioned on a reasoning text r_i shared by every pair (i, ·):
ℓ(y_j | x_i, r_i). This module is the arithmetic; ``scoring`` computes the ℓ values with a model.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

import torch


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


def club_mi_matrix(logps: torch.Tensor, n_negatives: int, seed: int) -> float:
    """CLUB MI from a full matrix ``logps[i, j]`` = ℓ(y_j | x_i): its diagonal against sampled off-diagonal pairs."""
    if logps.ndim != 2 or logps.shape[0] != logps.shape[1]:
        raise ValueError(f"expected a square [n, n] log-prob matrix, got {tuple(logps.shape)}")
    pairs = torch.tensor(negative_pairs(logps.shape[0], n_negatives, seed))
    return club_mi(logps.diagonal(), logps[pairs[:, 0], pairs[:, 1]])


@dataclass(frozen=True)
class EMI:
    """EMI of one split: MI(x; model responses) - MI(x; golden responses); ``reasoning``: whether conditioned on r."""

    emi: float
    mi_model: float
    mi_golden: float
    n: int
    n_negatives: int
    reasoning: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def emi_of(mi_model: float, mi_golden: float, n: int, n_negatives: int, reasoning: bool) -> EMI:
    return EMI(mi_model - mi_golden, mi_model, mi_golden, n, n_negatives, reasoning)


def emid(id_emi: EMI, ood_emi: EMI) -> float:
    """EMI(ID) - EMI(OOD): positive = the model degrades under the shift. R-EMID when both are R-EMI."""
    if id_emi.reasoning != ood_emi.reasoning:
        raise ValueError("EMID of an R-EMI and a plain EMI: both splits must use reasoning, or neither")
    return id_emi.emi - ood_emi.emi
