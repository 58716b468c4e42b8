"""CharacterEval's reward model (CharacterRM, released as BaichuanCharRM) as a scorer, loaded from a local folder.

As the authors' run_char_rm.py: each input (``charactereval_prompts.reward_model_input``) is tokenised without
special tokens, the end-of-sequence token appended, cut to its last ``max_length`` tokens, and scored alone
(no padding); the score is ``output[output_index] * scale + shift`` (theirs: index 1, ``* 4 + 1``, the 1-5
scale of the human annotation). The model and tokenizer classes are the folder's own Python code
(``model_class: modeling_baichuan.BaichuanCharRM``, run only with ``folder_code: true``) or, when null, the
Auto classes (a one-label sequence classifier). Nothing is downloaded: ``path`` is a folder on this machine.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.typed import Problem, Settings

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, kw_only=True)
class CharacterRMSettings(Settings):
    path: str | None  # a local folder holding the reward model's weights, config and tokenizer
    folder_code: bool  # run the folder's own Python code (model_class / tokenizer_class)
    model_class: str | None  # <module file stem>.<class> in the folder; null: AutoModelForSequenceClassification
    tokenizer_class: str | None  # <module file stem>.<class> in the folder; null: AutoTokenizer
    dtype: str
    device: str | None  # null: cuda when available, else cpu
    max_length: int  # tokens kept, from the end
    output_index: int  # which element of the model's output tuple is the score
    scale: float
    shift: float

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.path is None or not Path(self.path).is_dir():
            found.append(("path", "a local folder holding CharacterRM (e.g. a download of morecry/BaichuanCharRM)"))
        named = [k for k in ("model_class", "tokenizer_class") if getattr(self, k) is not None]
        for key in named:
            if getattr(self, key).count(".") != 1:
                found.append((key, "null or '<module>.<Class>' of a Python file in the folder"))
        if named and not self.folder_code:
            found.append(("folder_code", "true to run the folder's own code (model_class/tokenizer_class are set)"))
        if self.dtype not in DTYPES:
            found.append(("dtype", f"one of {', '.join(DTYPES)}"))
        if self.max_length < 2:
            found.append(("max_length", "an integer >= 2 (tokens)"))
        if self.output_index < 0:
            found.append(("output_index", "an integer >= 0"))
        return found

    def fingerprint(self) -> dict[str, Any]:
        """What a stored score depends on besides its input (scores are resumed only under the same)."""
        keys = ("model_class", "max_length", "output_index", "scale", "shift", "dtype")
        return {"path": str(Path(self.path).resolve()), **{k: getattr(self, k) for k in keys}}


def folder_class(folder: Path, dotted: str) -> type:
    """The class ``<module>.<Class>`` defined in ``folder/<module>.py`` (its relative imports resolved)."""
    module_name, class_name = dotted.split(".")
    package = f"rpbench_folder_code_{abs(hash(str(folder.resolve())))}"
    if package not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            package, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        sys.modules[package] = importlib.util.module_from_spec(spec)
    module = importlib.import_module(f"{package}.{module_name}")
    return getattr(module, class_name)


@dataclass(frozen=True)
class Scored:
    """One input's score, or why it has none (``error``)."""

    score: float | None
    error: str | None
    tokens: int
    truncated: bool


class CharacterRM:
    """The reward model of ``settings``, loaded once."""

    def __init__(self, settings: CharacterRMSettings):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = Path(settings.path)
        self.settings = settings
        tokenizer_cls = folder_class(folder, settings.tokenizer_class) if settings.tokenizer_class else AutoTokenizer
        model_cls = (
            folder_class(folder, settings.model_class) if settings.model_class else AutoModelForSequenceClassification
        )
        self.tokenizer = tokenizer_cls.from_pretrained(str(folder))
        if self.tokenizer.eos_token_id is None:
            raise ValueError(f"reward model {folder}: its tokenizer has no end-of-sequence token")
        device = settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = getattr(torch, settings.dtype)
        self.model = model_cls.from_pretrained(str(folder), dtype=dtype).to(device).eval()
        self.device = device

    def input_ids(self, text: str) -> tuple[list[int], bool]:
        """The token ids scored (the last ``max_length``) and whether any were cut."""
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        limit = self.settings.max_length
        return ids[-limit:], len(ids) > limit

    def score(self, text: str) -> Scored:
        """The score of one input; a model error or a non-finite output is a failure (no score)."""
        import torch

        ids, truncated = self.input_ids(text)
        try:
            with torch.no_grad():
                output = self.model(input_ids=torch.tensor([ids], device=self.device))
                value = output[self.settings.output_index]
                raw = float(value.float().reshape(-1)[0])
        except (RuntimeError, IndexError, ValueError) as error:
            return Scored(None, f"{type(error).__name__}: {error}", len(ids), truncated)
        if not math.isfinite(raw):
            return Scored(None, f"non-finite output {raw}", len(ids), truncated)
        return Scored(raw * self.settings.scale + self.settings.shift, None, len(ids), truncated)

    def score_all(self, texts: Sequence[str]) -> list[Scored]:
        return [self.score(t) for t in texts]
