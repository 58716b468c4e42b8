"""Representation Jensen-Shannon divergence (RJSD) between two sets of embeddings.

As in the EMID code (``vonNeumannEntropy`` / ``JSD_cov``, after uk-cliplab/representationJSD):
rows are L2-normalised, each set gives the uncentered, unscaled second-moment matrix C = ZᵀZ, the
entropy H(C) is the von Neumann entropy of C's positive eigenvalues divided by their sum (natural
log), and JSD(P, Q) = H((C_P + C_Q) / 2) - (H(C_P) + H(C_Q)) / 2.

Mixture weighting: unit rows make tr C = n, so the trace-normalised mixture (C_P + C_Q)/2 is the
second-moment matrix of the pooled sample, each set weighted by its size, n_P / (n_P + n_Q), while
the two entropies are averaged with weight 1/2 each. With n_P = n_Q this is the quantum JSD with
equal weights: 0 <= JSD <= ln 2, and 0 iff the normalised matrices coincide. With n_P != n_Q it
is not a divergence: it can be negative (a large low-entropy set against a small high-entropy
one). ``weighting="equal"`` trace-normalises each matrix before mixing, giving the equal-weight
quantum JSD whatever the sizes; ``"trace"`` is the authors' formula.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Weighting = Literal["trace", "equal"]
MAX_JSD = math.log(2)  # upper end of the equal-weight JSD
EIGENVALUE_FLOOR = 0.0  # eigenvalues above this count as positive, as in the EMID code (``> 0``)


def unit_rows(z: torch.Tensor, name: str = "embeddings") -> torch.Tensor:
    """``z`` [n, d] as float64 with each row scaled to unit L2 norm; an all-zero or non-finite row is an error."""
    if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty [n, d] matrix, got shape {tuple(z.shape)}")
    z = z.detach().to(dtype=torch.float64, device="cpu")
    if not torch.isfinite(z).all():
        raise ValueError(f"{name}: row {int((~torch.isfinite(z)).any(1).nonzero()[0])} is not finite")
    norms = z.norm(dim=1, keepdim=True)
    if (norms == 0).any():
        raise ValueError(f"{name}: row {int((norms[:, 0] == 0).nonzero()[0])} is all zeros and has no direction")
    return z / norms


def second_moment(z: torch.Tensor) -> torch.Tensor:
    """C = ZᵀZ [d, d] of the unit rows of ``z``: uncentered and not divided by n (trace = n)."""
    z = unit_rows(z)
    return z.T @ z


def von_neumann_entropy(c: torch.Tensor) -> float:
    """-Σ λ log λ over the positive eigenvalues of symmetric ``c`` divided by their sum (nats)."""
    eigenvalues = torch.linalg.eigvalsh(c.to(torch.float64))
    eigenvalues = eigenvalues[eigenvalues > EIGENVALUE_FLOOR]
    if eigenvalues.numel() == 0:
        raise ValueError("von Neumann entropy of a matrix without positive eigenvalues")
    eigenvalues = eigenvalues / eigenvalues.sum()
    return float(-(eigenvalues * eigenvalues.log()).sum())


def row_entropy(y: torch.Tensor) -> float:
    """``von_neumann_entropy(yᵀy)`` from the smaller of yᵀy [d, d] and the Gram matrix y yᵀ [n, n], which have
    the same positive eigenvalues: O(min(n, d)³), so a few samples of wide embeddings cost little."""
    return von_neumann_entropy(y @ y.T if y.shape[0] < y.shape[1] else y.T @ y)


def representation_jsd(p: torch.Tensor, q: torch.Tensor, weighting: Weighting) -> float:
    """RJSD between embedding sets ``p`` [n_P, d] and ``q`` [n_Q, d] (rows L2-normalised here); see the module.

    Each matrix is written as yᵀy of scaled rows (``equal``: C / tr C = Zᵀ Z / n; the mixture (C_P + C_Q) / 2
    stacks both sets' rows scaled by 1/√2), so every entropy is a ``row_entropy``."""
    if p.ndim == 2 and q.ndim == 2 and p.shape[1] != q.shape[1]:
        raise ValueError(f"embedding widths differ: {p.shape[1]} vs {q.shape[1]}")
    y_p, y_q = unit_rows(p, "p"), unit_rows(q, "q")
    if weighting == "equal":
        y_p, y_q = y_p / math.sqrt(len(y_p)), y_q / math.sqrt(len(y_q))
    elif weighting != "trace":
        raise ValueError(f"weighting must be 'trace' or 'equal', got {weighting!r}")
    mixture = torch.cat([y_p, y_q]) / math.sqrt(2)
    return row_entropy(mixture) - (row_entropy(y_p) + row_entropy(y_q)) / 2
