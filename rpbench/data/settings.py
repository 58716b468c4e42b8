"""The data stage's one input: ``DataSettings``, the ``data`` group typed and checked once by ``validate``.

The keys every data config has (conf/data/common/default.yaml and each base config) are typed fields; the
keys only some formats have (``task_dimensions``, ``image_root``, ``test_splits``...) stay as given in
``options``, and the readers get those of them they take (``reader_options``). Reading the files, training,
evaluation and the probes read the data settings from here, never from the composed config.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from rpbench.core.typed import Problem, Settings
from rpbench.data.files import package_path
from rpbench.data.readers import DUPLICATE_POLICIES, FORMATS, ON_ERROR_CHOICES
from rpbench.data.supervision import SUPERVISE_WHOLE

# The format options the readers take, when the data config sets them.
READER_OPTIONS = (
    "task_dimensions",
    "image_root",
    "test_splits",
    "columns",
    "tags",
    "default_system",
    "per_turn_samples",
    "reasoning_in_target",
    "policy_prompt",
    "heldout",
    "hub_timeout_s",
    "record_shape",
    "reference_judge",
    "rolebench",
)


@dataclass(frozen=True, kw_only=True)
class DataSettings(Settings):
    """The ``data`` group: where the records are, how they are read, limited, held out and rendered."""

    name: str
    format: str
    hf_dataset: str | None  # a hub dataset the file names are looked up in when not found locally
    files: Mapping[str, Any]  # split -> a file, or (test) set name -> a file or a list of files
    val_fraction: float
    max_length: int
    max_prompt_length: int
    max_train_samples: int | None
    max_test_samples: int | None
    on_error: Literal[ON_ERROR_CHOICES]  # type: ignore[valid-type]
    duplicates: Literal[DUPLICATE_POLICIES]  # type: ignore[valid-type]
    allow_overlap: bool
    images: Literal["keep", "drop"]
    prompts_source: str | None
    supervise: str
    speaker: str | None
    options: Mapping[str, Any]  # the keys of this format's configs alone, as given

    open_keys = ("files", "options")

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.format not in FORMATS:
            found.append(("format", f"one of {', '.join(FORMATS.names())}"))
        if not 0 <= self.val_fraction < 1:
            found.append(("val_fraction", "a held-out share, 0 <= f < 1"))
        for key in ("max_length", "max_prompt_length"):
            if getattr(self, key) < 1:
                found.append((key, "an integer >= 1 (tokens)"))
        for key in ("max_train_samples", "max_test_samples"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                found.append((key, "null (all records) or an integer >= 1"))
        if not self.supervise.strip():
            found.append(("supervise", f"{', '.join(SUPERVISE_WHOLE)} or a per-turn field's name"))
        if self.speaker is not None and not self.speaker.strip():
            found.append(("speaker", "null (every speaker) or a speaker's name"))
        if not isinstance(self.files, Mapping):
            found.append(("files", "a mapping of split to file"))
        return found

    @property
    def image_root(self) -> Path | None:
        """Where ``data.image_root`` is on this machine (None when unset)."""
        root = self.options.get("image_root")
        return package_path(str(root)) if root else None

    def reader_options(self) -> dict[str, Any]:
        """The keyword options the format's readers get: the format options set, the duplicates policy and
        the prompt source, the image folder resolved."""
        options = {key: self.options[key] for key in READER_OPTIONS if self.options.get(key) is not None}
        if "image_root" in options:
            options["image_root"] = self.image_root
        options["duplicates"] = self.duplicates
        if self.prompts_source is not None:
            options["prompts_source"] = self.prompts_source
        return options

    def with_files(self, files: Mapping[str, Any]) -> DataSettings:
        """The same data read from other files."""
        return replace(self, files=types.MappingProxyType(dict(files)))


def _grouped(values: Mapping[str, Any]) -> dict[str, Any]:
    """The data group's plain values with the keys DataSettings does not type gathered under ``options``."""
    typed = {f.name for f in fields(DataSettings)} - {"options"}
    grouped = {key: value for key, value in values.items() if key in typed}
    if isinstance(grouped.get("files"), Mapping):
        grouped["files"] = types.MappingProxyType(dict(grouped["files"]))
    options = {key: value for key, value in values.items() if key not in typed}
    return {**grouped, "options": types.MappingProxyType(options)}


def data_settings_problems(values: Mapping[str, Any], problems: list[str]) -> DataSettings | None:
    """The typed ``data`` group of plain ``values`` (the group resolved), or None with its problems added."""
    return DataSettings.collect(_grouped(values), "data", problems)


def data_spec(values: Mapping[str, Any]) -> DataSettings:
    """The typed ``data`` group of ``values`` (a plain mapping or a config node, resolved here); a
    ConfigError naming every bad key."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(values, resolve=True) if OmegaConf.is_config(values) else values
    return DataSettings.parse(_grouped(plain), "data")
