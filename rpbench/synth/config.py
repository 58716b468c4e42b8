"""The ``synth`` config group as typed settings (every value from conf/synth/*.yaml; none in code)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rpbench.core.typed import Problem, Settings

STAGES = ("personas", "profiles", "retrieval", "dialogues")
REQUEST_KINDS = ("profile", "chat", "reply")  # synth.max_tokens: the reply length of each kind of request
COUNTS = ("n_personas", "profile_tries", "embed_batch_size", "top_k", "paper_profiles", "chat_exchanges",
          "dialogue_tries", "batch_size")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SynthSettings(Settings):
    name: str
    out_dir: str
    stages: tuple[str, ...]
    personas_file: str | None
    n_personas: int
    profile_tries: int
    pool_file: str | None
    index_dir: str | None  # where the pool's index is kept (None: beside the pool)
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

    def problems(self) -> list[Problem]:
        from rpbench.synth.dialogues import LABELS

        found: list[Problem] = []
        if any(s not in STAGES for s in self.stages) or list(self.stages) != sorted(set(self.stages), key=STAGES.index):
            found.append(("stages", f"a list of {', '.join(STAGES)}, each once, in that order"))
        found += [(key, "an integer >= 1") for key in COUNTS if getattr(self, key) < 1]
        if not 0 <= self.test_fraction < 1:
            found.append(("test_fraction", "a share in [0, 1)"))
        if set(self.max_tokens) != set(REQUEST_KINDS) or any(v < 1 for v in self.max_tokens.values()):
            found.append(("max_tokens", f"a token count >= 1 for each of {', '.join(REQUEST_KINDS)}"))
        if set(self.table2_single_label) != set(LABELS) or any(v < 0 for v in self.table2_single_label.values()):
            found.append(("table2_single_label", f"a count >= 0 for each of {', '.join(LABELS)}"))
        if self.budget_usd is not None and self.budget_usd <= 0:
            found.append(("budget_usd", "a number of USD > 0, or null for no limit"))
        if Path(self.out_dir).exists() and not Path(self.out_dir).is_dir():
            found.append(("out_dir", "a folder (this path is a file)"))
        if "personas" in self.stages and not self.personas_file:
            found.append(("personas_file", "a file of one-line personas (stage personas reads it)"))
        if "retrieval" in self.stages and not self.pool_file:
            found.append(("pool_file", "an MRC pool in MS MARCO's layout, JSON lines (stage retrieval reads it)"))
        return found
