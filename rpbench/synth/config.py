"""The ``synth`` config group as a typed object (defaults live in conf/synth/*.yaml, not here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from rpbench.data.errors import ConfigError

STAGES = ("personas", "profiles", "retrieval", "dialogues")


@dataclass(frozen=True)
class SynthConfig:
    name: str
    out_dir: str
    stages: tuple[str, ...]
    personas_file: str | None
    n_personas: int
    profile_tries: int
    pool_file: str | None
    encoder: str | None
    embed_batch_size: int
    top_k: int
    table2_single_label: Mapping[str, int]
    paper_profiles: int
    chat_exchanges: int
    dialogue_tries: int
    test_fraction: float
    overlap_test_file: str | None
    allow_overlap: bool
    max_tokens: Mapping[str, int]
    batch_size: int
    budget_usd: float | None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SynthConfig:
        known = {f.name for f in fields(cls)}
        unknown, missing = sorted(set(values) - known), sorted(known - set(values))
        if unknown or missing:
            raise ConfigError(f"synth: unknown keys {unknown}, missing keys {missing}")
        config = cls(**{**values, "stages": tuple(values["stages"])})
        bad = [s for s in config.stages if s not in STAGES]
        if bad or list(config.stages) != sorted(config.stages, key=STAGES.index):
            raise ConfigError(f"synth.stages: a list of {list(STAGES)} in that order, got {list(config.stages)}")
        for key in (
            "n_personas",
            "profile_tries",
            "embed_batch_size",
            "top_k",
            "chat_exchanges",
            "dialogue_tries",
            "batch_size",
        ):
            if int(getattr(config, key)) < 1:
                raise ConfigError(f"synth.{key} must be >= 1, got {getattr(config, key)}")
        if not 0 <= config.test_fraction < 1:
            raise ConfigError(f"synth.test_fraction must be in [0, 1), got {config.test_fraction}")
        if set(config.max_tokens) != {"profile", "chat", "reply"}:
            raise ConfigError(f"synth.max_tokens needs profile, chat and reply, got {sorted(config.max_tokens)}")
        if "personas" in config.stages and not config.personas_file:
            raise ConfigError("synth.personas_file: a file of one-line personas is needed for stage personas")
        if "retrieval" in config.stages and not config.pool_file:
            raise ConfigError(
                "synth.pool_file: an MRC pool (MS MARCO layout, JSON lines) is needed for stage retrieval"
            )
        return config
