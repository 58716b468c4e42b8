"""Split hygiene: a training run refuses records that also appear in its test split.

Two records overlap when the content hash of their (prompt, reference) pair is equal, where an SFT
example's pair is its final assistant turn and everything before it (``records.split_for_overlap``).
"""

from __future__ import annotations

from collections.abc import Iterable

from rpbench.core.errors import RpbenchError
from rpbench.data.records import Example, content_hash, split_for_overlap

SHOWN_IDS = 5


class OverlapError(RpbenchError, ValueError):
    """Training records that are also test records: a user error, printed as one line."""


def check_overlap(
    train: Iterable[Example],
    test: Iterable[Example],
    *,
    allow_overlap: bool,
    train_name: str = "train",
    test_name: str = "test",
) -> int:
    """The number of ``train`` records whose (prompt, reference) also occurs in ``test``.

    Raises OverlapError with the count and the first ids unless ``allow_overlap`` (then the caller
    reports the count).
    """
    test_ids: dict[str, str] = {}
    for example in test:
        test_ids.setdefault(content_hash(*split_for_overlap(example)), example.id)
    overlapping = [
        (example.id, test_ids[h]) for example in train if (h := content_hash(*split_for_overlap(example))) in test_ids
    ]
    if overlapping and not allow_overlap:
        shown = ", ".join(f"{train_id} (= {test_name} {test_id})" for train_id, test_id in overlapping[:SHOWN_IDS])
        raise OverlapError(
            f"{len(overlapping)} {train_name} records also appear in {test_name} (same prompt and reference); "
            f"first: {shown}. Remove them, or set data.allow_overlap=true to train on them anyway."
        )
    return len(overlapping)
