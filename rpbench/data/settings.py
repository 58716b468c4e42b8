"""The data stage's one input: ``DataSettings``, the ``data`` group typed and checked once by ``validate``.

The keys every data config has (conf/data/common/default.yaml and each base config) are typed fields; the
keys only one format's configs have (``task_dimensions``, ``image_root``, ``test_splits``...) are that format's
options (its ``DataFormat.options`` class, ``options``), parsed with the group and handed to its readers
(``policy`` says how they read). Reading the files, training, evaluation and the probes read the data settings
from here, never from the composed config.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Problem, Settings
from rpbench.data.readers import DUPLICATE_POLICIES, FORMATS, ON_ERROR_CHOICES, FormatOptions, ReadPolicy
from rpbench.data.supervision import SUPERVISE_WHOLE, turn_field

# data.files: split -> a file (null: none), or (test) set name -> a file or a list of files
DataFiles = Mapping[str, str | Mapping[str, str | tuple[str, ...]] | None]


@dataclass(frozen=True, kw_only=True)
class DataSettings(Settings):
    """The ``data`` group: where the records are, how they are read, limited, held out and rendered."""

    name: str
    format: str
    hf_dataset: str | None  # a hub dataset the file names are looked up in when not found locally
    files: DataFiles
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
    options: FormatOptions  # the keys of this format's configs alone (its DataFormat.options class)

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
        return found

    @property
    def image_root(self) -> Path | None:
        """Where ``data.image_root`` is on this machine (None: the format reads no images, or none is set)."""
        return self.options.image_folder()

    def policy(self, split: str) -> ReadPolicy:
        """How the readers read ``split``: the error and duplicates policies and the prompts' wording; a
        training file's conversations supervised as ``data.supervise`` says."""
        field = turn_field(self.supervise) if split == "train" else None
        return ReadPolicy(self.on_error, self.duplicates, field, self.prompts_source)

    def with_files(self, files: Mapping[str, Any]) -> DataSettings:
        """The same data read from other files."""
        return replace(self, files=types.MappingProxyType(dict(files)))


SHARED_KEYS = frozenset(f.name for f in fields(DataSettings)) - {"options"}


def data_settings_problems(values: Mapping[str, Any], problems: list[str]) -> DataSettings | None:
    """The typed ``data`` group of plain ``values`` (the group resolved), or None with its problems added: the
    keys every data config has, and the others as the format's options."""
    found_before = len(problems)
    shared = {key: value for key, value in values.items() if key in SHARED_KEYS}
    own = {key: value for key, value in values.items() if key not in SHARED_KEYS}
    format = values.get("format")
    options = FORMATS.get(format).options.collect(own, "data", problems) if format in FORMATS else None
    # an unknown format (DataSettings names it) or options with problems: their place held, nothing returned
    data = DataSettings.collect({**shared, "options": options or FormatOptions()}, "data", problems)
    return data if len(problems) == found_before else None


def data_spec(values: Mapping[str, Any]) -> DataSettings:
    """The typed ``data`` group of ``values`` (a plain mapping or a config node, resolved here); a
    ConfigError naming every bad key."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(values, resolve=True) if OmegaConf.is_config(values) else values
    problems: list[str] = []
    data = data_settings_problems(plain, problems)
    if data is None:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return data
