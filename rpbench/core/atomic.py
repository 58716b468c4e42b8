"""Files that appear whole or not at all: write next to the target, then rename over it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def partial_path(final: str | Path) -> Path:
    """Where ``final`` is written before it is published: a hidden sibling (same filesystem, so renames are atomic)."""
    final = Path(final)
    return final.with_name(f".{final.name}.partial")


def publish(partial: str | Path, final: str | Path) -> Path:
    """Move a finished ``partial`` file or folder to ``final``, replacing what was there.

    A file is replaced in one ``os.replace``. A folder cannot be renamed over a full one: the old folder
    is first renamed aside, so a kill leaves either the old or the new folder whole at ``final``
    (or, between the two renames, none, and the old one beside it)."""
    partial, final = Path(partial), Path(final)
    if partial.is_dir() and final.is_dir():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(partial, final)
        shutil.rmtree(old)
    else:
        os.replace(partial, final)
    return final
