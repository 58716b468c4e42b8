"""Where the project's config tree lives: ``conf/`` beside the ``rpbench`` package (an editable install or a
clone), read by run.py, the ``rpbench`` command and everything that composes a config."""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
