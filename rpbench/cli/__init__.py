"""The ``rpbench`` command (``python -m rpbench`` too): ``rpbench train|eval|synthesize|serve|sweep|field|leaderboard|
pairs|help``. ``run.py`` and ``sweep.py`` in a clone are ``rpbench train`` and ``rpbench sweep``."""

from rpbench.cli.commands import main

__all__ = ["main"]
