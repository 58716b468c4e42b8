"""The typed model group (conf/model/*.yaml): every key parsed once by ``ModelSettings.parse``, defaulted in the
YAML alone (conf/model/common/default.yaml, tiny.yaml), read as attributes by the loaders and the stages."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rpbench.core.typed import Problem, Settings

TINY_PREFIX = "tiny:"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True, kw_only=True)
class LoraSettings(Settings):
    """peft LoRA adapters instead of full fine-tuning; ``target_modules`` null: the family's default modules."""

    r: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...] | Literal["all-linear"] | None

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.r < 1:
            found.append(("r", "an integer rank >= 1"))
        if self.alpha <= 0:
            found.append(("alpha", "a number > 0"))
        if not 0 <= self.dropout < 1:
            found.append(("dropout", "a probability in [0, 1)"))
        if self.target_modules == ():
            found.append(("target_modules", "a list of module names, 'all-linear', or null (the family's)"))
        return found


@dataclass(frozen=True, kw_only=True)
class ModelSettings(Settings):
    """One model: where its weights come from, its family, precision, template and adapters.

    ``freeze_vision`` (families with a vision tower), ``init_seed`` and ``tiny`` (random-initialised tiny
    models) and ``unsupported`` (a model rpbench refuses, with why) belong to some entries only: None elsewhere.
    """

    only_some: ClassVar[tuple[str, ...]] = ("freeze_vision", "init_seed", "tiny", "unsupported")

    name: str
    name_or_path: str
    family: str | None  # null: a model rpbench has no family for (then ``unsupported`` says why)
    gguf_file: str | None
    instruct: bool
    dtype: Literal["float32", "bfloat16", "float16"]
    attn_implementation: str
    gradient_checkpointing: bool
    chat_template: str | None
    end_of_turn: str
    trust_remote_code: bool
    revision: str | None
    lora: LoraSettings | None
    quantization: Literal["4bit", "8bit"] | None
    freeze_vision: bool | None
    init_seed: int | None
    tiny: Mapping[str, Any] | None
    unsupported: str | None

    @property
    def is_tiny(self) -> bool:
        return self.name_or_path.startswith(TINY_PREFIX)

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.family is None and self.unsupported is None:
            found.append(("family", "a registered model family (rpbench.models.families)"))
        if self.attn_implementation not in ATTENTION:
            found.append(("attn_implementation", f"one of {', '.join(ATTENTION)}"))
        if self.is_tiny and (self.tiny is None or self.init_seed is None):
            found.append(f"tiny: a {TINY_PREFIX} model needs tiny sizes and init_seed (conf/model/common/tiny.yaml)")
        elif self.is_tiny and "vocab_size" not in self.tiny:
            found.append(("tiny", "sizes that include vocab_size (its tokenizer's size)"))
        return found


def looks_local(name: str) -> bool:
    """A path rather than a hub id (``<org>/<name>`` or a legacy bare name such as ``gpt2``)."""
    return name.startswith(("/", ".", "~")) or ("/" in name and not HUB_ID.match(name))
