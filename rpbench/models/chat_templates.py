"""Chat templates shipped with rpbench (the real families' formats) and how a model config picks one."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

TEMPLATE_DIR = resources.files("rpbench") / "resources" / "chat_templates"


def available_templates() -> list[str]:
    return sorted(p.name.removesuffix(".jinja") for p in TEMPLATE_DIR.iterdir() if p.name.endswith(".jinja"))


def load_chat_template(name_or_path: str) -> str:
    """A shipped template by name (``qwen2.5``, ``llama3``) or a Jinja file path."""
    shipped = TEMPLATE_DIR / f"{name_or_path}.jinja"
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    path = Path(name_or_path)
    if path.is_file():
        return path.read_text(encoding="utf-8")
    raise ValueError(
        f"model.chat_template={name_or_path!r} is neither a shipped template {available_templates()} "
        "nor an existing Jinja file"
    )
