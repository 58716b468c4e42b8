"""Python's garbage collector and a run's million long-lived objects (torch, transformers, Lightning, ...)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_heap() -> Iterator[None]:
    """While the block runs, the collector leaves alone what existed before it (the imported modules: a full
    collection walks about a million objects, a second or more each time); they are collected as usual after."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
