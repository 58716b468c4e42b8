"""Prompt templates: rpbench's own wording by default, or a released repository's, read at run time.

rpbench ships no prompt text taken from another project. Where a paper's code has a prompt, rpbench's
default is its own wording with the same structure and slots, and ``prompts.source`` (a path to the
user's clone of the authors' repository) makes ``resolve`` read the authors' template from their file
instead. ``Released`` says where: a file inside the clone and a Python variable assigned in it (module or
function level, its ``occurrence``-th assignment) holding a string or an f-string; when the assigned value
is a container, the one string inside it that has slots (``key``: of a dict literal, the value under that
key); a keyword argument ``symbol=...`` of a call counts as an assignment. An f-string's fields become
``{slots}``; ``rename`` maps the authors' slot names to rpbench's, and names a field that is an expression
(``"aspect_desc[score_key]": "aspect"``), which is an error otherwise. A released template must have the
default's slots.

Every template records where it came from and the sha256 of its text (``Template.record``), so a run's
results prove which prompt was used.
"""

from __future__ import annotations

import ast
import hashlib
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings

RPBENCH = "rpbench"


@dataclass(frozen=True, kw_only=True)
class PromptSettings(Settings):
    """The ``prompts`` group: null (rpbench's own wording) or a clone of a paper's repository to read the
    authors' templates from."""

    source: str | None


class TemplateError(ConfigError):
    """A released template that cannot be read, or a template rendered with the wrong slots (a user error:
    the message names the file)."""


@dataclass(frozen=True)
class Released:
    """Where a released repository keeps a template (module docstring)."""

    file: str
    symbol: str
    occurrence: int = 0
    rename: Mapping[str, str] = field(default_factory=dict)
    key: str | None = None

    def describe(self) -> str:
        where = f"{self.file}:{self.symbol}" + (f"[{self.key!r}]" if self.key is not None else "")
        return where + (f"#{self.occurrence}" if self.occurrence else "")


def slots_of(text: str) -> tuple[str, ...]:
    """The named ``{slots}`` of a str.format template, in order of first use."""
    names: list[str] = []
    for _, name, _, _ in string.Formatter().parse(text):
        if name is not None:
            if not name.isidentifier():
                raise TemplateError(f"template slot {{{name}}} is not a plain name")
            if name not in names:
                names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    origin: str  # "rpbench" or "<file>:<symbol>" of the released repository

    @property
    def slots(self) -> tuple[str, ...]:
        return slots_of(self.text)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def render(self, **values: Any) -> str:
        missing, unknown = set(self.slots) - set(values), set(values) - set(self.slots)
        if missing or unknown:
            raise TemplateError(
                f"template {self.name!r} ({self.origin}) has slots {list(self.slots)}; "
                f"missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        return self.text.format(**values)

    def record(self) -> dict[str, str]:
        return {"origin": self.origin, "sha256": self.sha256}


def resolve(name: str, default: str, released: Released | None, source: str | Path | None) -> Template:
    """rpbench's ``default`` when ``source`` is None (or the template has no released counterpart), else the
    released template read from ``source / released.file``, which must have the default's slots."""
    if source is None or released is None:
        return Template(name, default, RPBENCH)
    path = Path(source).expanduser() / released.file
    try:
        text = read_released(path, released, source)
        template = Template(name, text, released.describe())
        slots = template.slots
    except TemplateError as error:
        raise error if str(path) in str(error) else TemplateError(f"{path}: {error}") from None
    except ValueError as error:  # str.format's parser: an unbalanced brace
        raise TemplateError(f"{path}: {released.symbol} is not a str.format template ({error})") from None
    if set(slots) != set(slots_of(default)):
        raise TemplateError(
            f"{path}: {released.symbol} has slots {sorted(template.slots)} after renaming "
            f"{dict(released.rename)}, expected {sorted(slots_of(default))} for template {name!r}"
        )
    return template


def read_source_file(path: Path, source: str | Path) -> str:
    """The text of ``path`` inside the clone ``source``; a TemplateError naming it when it is missing, not a
    file, unreadable, not UTF-8, or a link leading outside the clone (never read)."""
    root = Path(source).expanduser().resolve()
    if not root.is_dir():
        raise TemplateError(f"{path}: prompts.source={source} is not a folder (a clone of the authors' repository)")
    if not path.resolve().is_relative_to(root):
        raise TemplateError(f"{path}: a link leading outside prompts.source ({source}): not read")
    if path.is_dir():
        raise TemplateError(f"{path}: a folder, not a file")
    if not path.is_file():
        raise TemplateError(f"{path}: no such file (prompts.source must be a clone of the authors' repository)")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TemplateError(f"{path}: cannot be read ({type(error).__name__}: {error})") from None


def read_released(path: Path, released: Released, source: str | Path) -> str:
    """The template text assigned to ``released.symbol`` in the Python file at ``path`` of the clone ``source``
    (module docstring)."""
    text = read_source_file(path, source)
    try:
        tree = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError) as error:
        raise TemplateError(f"{path}: not a readable Python file ({error})") from error
    values = [node.value for node in ast.walk(tree) if _assigns(node, released.symbol)]
    values.sort(key=lambda node: (node.lineno, node.col_offset))
    if len(values) <= released.occurrence:
        raise TemplateError(
            f"{path}: {len(values)} assignment(s) to {released.symbol!r}, wanted number {released.occurrence + 1}"
        )
    node = values[released.occurrence]
    if released.key is not None:
        node = _dict_entry(path, node, released)
    text = _template_text(node, released.rename)
    if text is None:
        strings = [n for n in ast.walk(node) if isinstance(n, ast.JoinedStr)] or [
            n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        if len(strings) != 1:
            raise TemplateError(f"{path}:{node.lineno}: {released.symbol} holds no single string or f-string template")
        text = _template_text(strings[0], released.rename)
    return text


def _dict_entry(path: Path, node: ast.AST, released: Released) -> ast.AST:
    """The value under ``released.key`` of the dict literal ``node``."""
    if not isinstance(node, ast.Dict):
        raise TemplateError(f"{path}:{node.lineno}: {released.symbol} is not a dict literal (key {released.key!r})")
    for key, value in zip(node.keys, node.values):
        if isinstance(key, ast.Constant) and key.value == released.key:
            return value
    raise TemplateError(f"{path}:{node.lineno}: {released.symbol} has no key {released.key!r}")


def _assigns(node: ast.AST, symbol: str) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == symbol for t in node.targets)
    if isinstance(node, ast.keyword):
        return node.arg == symbol
    return isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == symbol


def _template_text(node: ast.AST, rename: Mapping[str, str]) -> str | None:
    """A string constant as the str.format template it is in the released code (slots renamed), an f-string
    with its fields as ``{slots}`` and its literal braces escaped; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _renamed(node.value, rename)  # a str.format template in the released code
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value).replace("{", "{{").replace("}", "}}"))
        elif isinstance(value, ast.FormattedValue):
            source = ast.unparse(value.value)
            if not isinstance(value.value, ast.Name) and source not in rename:
                raise TemplateError(
                    f"line {node.lineno}: f-string field {source!r} is an expression, not a plain name "
                    "(name it in rename)"
                )
            if value.conversion != -1 or value.format_spec is not None:
                raise TemplateError(f"line {node.lineno}: f-string field {source!r} has a conversion or format")
            parts.append("{" + rename.get(source, source) + "}")
        else:
            raise TemplateError(f"line {node.lineno}: unexpected part of an f-string")
    return "".join(parts)


def _renamed(text: str, rename: Mapping[str, str]) -> str:
    """``text`` with its ``{slot}`` names mapped through ``rename`` (literal braces kept escaped)."""
    parts = []
    for literal, name, spec, conversion in string.Formatter().parse(text):
        parts.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is not None:
            if spec or conversion:
                raise TemplateError(f"template slot {{{name}}} has a conversion or format spec")
            parts.append("{" + rename.get(name, name) + "}")
    return "".join(parts)
