"""Progress of a long loop, the one way rpbench shows it: a tqdm bar on a terminal; where stderr is not one (a
log file, a pipe, a cluster job) a plain logged line every ``PLAIN_EVERY_S`` seconds and one at the end, never a
bar's carriage returns."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

PLAIN_EVERY_S = 30.0  # how often a plain line says how far a loop is


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    desc: str,
    total: int | None = None,
    unit: str = "item",
    initial: int = 0,
    disable: bool = False,
) -> Any:
    """A tqdm bar on a terminal, else ``PlainProgress``; either counts with ``update(n)``, ends with ``close()``
    (or the ``with`` block) and wraps ``iterable`` when given one."""
    if disable or sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, total=total, unit=unit, initial=initial, disable=disable)
    return PlainProgress(iterable, desc=desc, total=total, unit=unit, initial=initial)


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


class PlainProgress:
    """Progress as log lines: ``<desc>: <done>/<total> <unit>s (<share>), <elapsed> elapsed, ETA <left>`` at most
    every ``PLAIN_EVERY_S`` seconds while counting, and the count with the time taken when closed."""

    def __init__(self, iterable: Iterable[Any] | None, *, desc: str, total: int | None, unit: str, initial: int):
        self.iterable, self.desc, self.unit, self.n = iterable, desc, unit, initial
        self.total = total if total is not None or iterable is None else _length(iterable)
        self.started = self.said = time.monotonic()
        self.first, self.closed = initial, False

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.iterable or ():
                yield item
                self.update(1)
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.said >= PLAIN_EVERY_S:
            self.said = now
            log.info("%s", self.line(now))

    def line(self, now: float) -> str:
        """How far the loop is at ``now``: the count, its share of the total, the time taken and left."""
        elapsed = now - self.started
        if self.total is None:
            return f"{self.desc}: {self.n} {self.unit}s, {_clock(elapsed)} elapsed"
        done = self.n - self.first
        left = (self.total - self.n) * elapsed / done if done > 0 else None
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        eta = f", ETA {_clock(left)}" if left is not None and self.n < self.total else ""
        return f"{self.desc}: {self.n}/{self.total} {self.unit}s{share}, {_clock(elapsed)} elapsed{eta}"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        log.info("%s", self.line(time.monotonic()))


def _length(iterable: Iterable[Any]) -> int | None:
    try:
        return len(iterable)  # type: ignore[arg-type]
    except TypeError:
        return None
