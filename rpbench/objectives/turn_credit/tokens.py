"""Turn advantages onto tokens: the policy's tokens of turn t get turn t's advantage; the tokens it did not write
(the scenario, the user's turns, the template's) are not in the loss at all (``Rollouts.policy_mask``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence


def token_advantages(per_turn: torch.Tensor, turn_of: Sequence[Sequence[int]]) -> torch.Tensor:
    """``(rows, longest)`` advantages of each row's policy tokens in order (the loss's per-token layout,
    ``completion_logps``), padded with 0; ``turn_of[i]``: the turn (0-based) of each completion token of row i,
    -1 for a token the policy did not write."""
    rows = []
    for i, turns in enumerate(turn_of):
        own = torch.tensor([t for t in turns if t >= 0], dtype=torch.long)
        if len(own) and int(own.max()) >= per_turn.shape[1]:
            raise ValueError(f"row {i} has a token of turn {int(own.max())}, beyond the {per_turn.shape[1]} scored")
        rows.append(per_turn[i, own] if len(own) else per_turn.new_zeros(0))
    return pad_sequence(rows, batch_first=True) if rows else per_turn.new_zeros(0, 0)
