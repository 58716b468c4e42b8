"""Typed, frozen settings read from one config group: each key parsed once, checked once, defaulted nowhere.

A settings class is a frozen dataclass without defaults (every value comes from the YAML) that subclasses
``Settings``. ``parse(values, where)`` converts a plain mapping to it: unknown and missing keys, values of
the wrong type (a string where a number goes, NaN or infinity, a bool given as a number) and the class's
own ``problems()`` are all reported together, each naming the dotted key, its value and what is expected::

    @dataclass(frozen=True, kw_only=True)
    class Bootstrap(Settings):
        n_resamples: int
        confidence: float

        def problems(self):
            return [("confidence", "a level in (0, 1)")] if not 0 < self.confidence < 1 else []

    Bootstrap.parse({"n_resamples": 1000, "confidence": 2}, "evaluator.bootstrap")
    # ConfigError: evaluator.bootstrap.confidence=2.0: expected a level in (0, 1)

Fields typed with another ``Settings`` class are parsed recursively (an instance of it, already parsed, is
taken as it is); ``tuple[X, ...]`` accepts a list (``tuple[X, Y]`` a list of two); ``Mapping[str, X]`` a mapping
(returned read-only), a bad item of either named by its index or key; ``None`` null alone; a union its first
member the value parses as (a union of settings classes: the first that parses without a problem, else the
first's problems). A field named in ``only_some`` (a key only some entries of a group have, such as a tiny
model's ``init_seed``) is None when absent. A problem about a key of another group (a field holding ``${env}``,
whose keys are set as ``env.*``) is an ``Elsewhere`` message: it names that key in full and gets no ``where``
prefix.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar, Union

from rpbench.core.errors import ConfigError

S = TypeVar("S", bound="Settings")
# (key relative to the settings, what is expected), or a message starting with the key ("runs: ..."),
# or an Elsewhere message starting with another group's key in full
Problem = tuple[str, str] | str


class Elsewhere(str):
    """A problem message naming a key outside the settings' own group in full (``env.rewards[0]: ...``):
    reported as it is, without the settings' ``where`` in front."""


class Invalid(Exception):
    """A value that cannot be converted to its field's type; ``expected`` says what would be."""

    def __init__(self, expected: str):
        self.expected = expected


def _describe(kind: Any) -> str:
    names = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string", type(None): "null"}
    if kind in names:
        return names[kind]
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return " or ".join(_describe(a) for a in args) + (" or null" if type(None) in typing.get_args(kind) else "")
    if origin is tuple:
        return "a list"
    if origin in (Mapping, dict):
        return "a mapping"
    if typing.get_origin(kind) is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(kind)))
    return getattr(kind, "__name__", str(kind))


def convert(value: Any, kind: Any, where: str, problems: list[str]) -> Any:
    """``value`` as ``kind`` (a field's annotation); raises Invalid, or adds nested settings' problems."""
    if kind is Any:
        return value
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        args = typing.get_args(kind)
        if value is None and type(None) in args:
            return None
        first: list[str] | None = None  # the problems of the first member that took the value's shape
        for arg in (a for a in args if a is not type(None)):
            tried: list[str] = []
            try:
                converted = convert(value, arg, where, tried)
            except Invalid:
                continue
            if not tried:
                return converted
            first = tried if first is None else first
        if first is None:
            raise Invalid(_describe(kind))
        problems.extend(first)
        return None
    if origin is typing.Literal:
        if value in typing.get_args(kind):
            return value
        raise Invalid(_describe(kind))
    if kind is type(None):
        if value is None:
            return None
        raise Invalid("null")
    if value is None:
        raise Invalid(_describe(kind))
    if isinstance(kind, type) and issubclass(kind, Settings):
        if isinstance(value, kind):
            return value
        if not isinstance(value, Mapping):
            raise Invalid("a mapping")
        return kind.collect(value, where, problems)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise Invalid("true or false")
    if kind is int:
        if isinstance(value, bool):
            raise Invalid("an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise Invalid("an integer")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Invalid("a finite number")
        return float(value)
    if kind is str:
        if isinstance(value, str):
            return value
        raise Invalid("a string")
    if origin is tuple:
        if isinstance(value, (str, Mapping)) or not isinstance(value, (list, tuple)):
            raise Invalid("a list")
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_item(v, args[0], f"{where}[{i}]", problems) for i, v in enumerate(value))
        expected = f"a list of {len(args)}: {', '.join(_describe(a) for a in args)}"
        if len(args) != len(value):
            raise Invalid(expected)
        try:
            return tuple(convert(v, a, f"{where}[{i}]", problems) for i, (v, a) in enumerate(zip(value, args)))
        except Invalid:
            raise Invalid(expected) from None
    if origin in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise Invalid("a mapping")
        _, item = typing.get_args(kind)
        return types.MappingProxyType({str(k): _item(v, item, f"{where}.{k}", problems) for k, v in value.items()})
    return value


def _item(value: Any, kind: Any, where: str, problems: list[str]) -> Any:
    """An item of a list or a mapping as ``kind``; one that cannot be is a problem naming it (None in its place)."""
    try:
        return convert(value, kind, where, problems)
    except Invalid as error:
        problems.append(f"{where}={value!r}: expected {error.expected}")
        return None


@dataclass(frozen=True)
class Settings:
    """Base of typed settings: see the module docstring."""

    only_some: ClassVar[tuple[str, ...]] = ()  # fields only some entries of the group have: None when absent

    def problems(self) -> list[Problem]:
        """What is wrong with the values, as (key, expected) pairs, messages starting with the key, or
        ``Elsewhere`` messages about another group's key; none by default."""
        return []

    @classmethod
    def collect(cls: type[S], values: Mapping[str, Any], where: str, problems: list[str]) -> S | None:
        """The settings of ``values``, or None with every problem added to ``problems``."""
        hints = typing.get_type_hints(cls)
        prefix = f"{where}." if where else ""  # where="": keys at the top of the run config
        known = [f.name for f in fields(cls)]
        found_before = len(problems)
        for key in sorted(set(values) - set(known)):
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            problems.append(f"{prefix}{key}: unknown key{hint}; valid keys: {', '.join(sorted(known))}")
        converted = {}
        for name in known:
            if name not in values and name in cls.only_some:
                converted[name] = None
                continue
            if name not in values:
                problems.append(f"{prefix}{name}: missing (it has no default in code: set it in the YAML)")
                continue
            try:
                converted[name] = convert(values[name], hints[name], f"{prefix}{name}", problems)
            except Invalid as error:
                problems.append(f"{prefix}{name}={values[name]!r}: expected {error.expected}")
        if len(problems) > found_before:
            return None
        settings = cls(**converted)
        for problem in settings.problems():
            if isinstance(problem, Elsewhere):
                problems.append(str(problem))
                continue
            if isinstance(problem, str):  # a message of its own, after the key it starts with
                problems.append(f"{prefix}{problem}")
                continue
            key, expected = problem
            problems.append(f"{prefix}{key}={_shown(_dotted(settings, key))}: expected {expected}")
        return None if len(problems) > found_before else settings

    @classmethod
    def parse(cls: type[S], values: Mapping[str, Any], where: str) -> S:
        """The settings of ``values``; a ConfigError listing every problem otherwise."""
        problems: list[str] = []
        settings = cls.collect(values, where, problems)
        if settings is None:
            raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
        return settings


def _dotted(settings: Any, key: str) -> Any:
    """The value at ``key`` (``a.b``, ``a[0].b``) under ``settings``."""
    for part in key.replace("[", ".[").split("."):
        if part.startswith("["):
            index = int(part[1:-1])
            settings = settings[index] if isinstance(settings, (list, tuple)) and index < len(settings) else None
        else:
            settings = settings.get(part) if isinstance(settings, Mapping) else getattr(settings, part, None)
    return settings


def as_dict(settings: Settings) -> dict[str, Any]:
    """The fields of ``settings`` as keyword arguments (nested settings stay typed)."""
    return {f.name: getattr(settings, f.name) for f in fields(settings)}


def plain(value: Any) -> Any:
    """Parsed settings as plain data: settings and read-only mappings as dicts, tuples as lists."""
    if isinstance(value, Settings):
        value = as_dict(value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def _shown(value: Any) -> str:
    """A value as the user wrote it: plain data for nested settings and read-only mappings."""
    if isinstance(value, Settings):
        value = as_dict(value)
    if isinstance(value, (types.MappingProxyType, Mapping)):
        value = dict(value)
    if isinstance(value, tuple):
        value = list(value)
    return repr(value)


def defaults_declared(cls: type) -> list[str]:
    """The fields of a settings class that declare a default in code (there should be none)."""
    from dataclasses import MISSING

    return [f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING]
