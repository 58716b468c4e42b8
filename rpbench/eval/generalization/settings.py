"""``evaluator.generalization`` typed (conf/evaluator/rpgbench.yaml documents each key): the R-EMID analysis and
the encoder of the JS terms, which ``evaluator=shift`` shares. Parsed with the evaluator group at startup;
light to import (no torch), unlike the analysis it configures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rpbench.core.typed import Problem, Settings
from rpbench.models.generation import GenerationSettings

# Samples are decoded without their stop token and stripped: one whose re-encoded text has at least
# max_new_tokens - CUT_MARGIN_TOKENS tokens is taken as cut at the limit (whitespace stripped at its ends)
CUT_MARGIN_TOKENS = 2


@dataclass(frozen=True, kw_only=True)
class EntropySettings(Settings):
    """``evaluator.generalization.entropy``: the Ĥ of Theorem 3.4 from sampled responses."""

    samples: int  # K per prompt; 0: off (Ĥ = 1)
    max_new_tokens: int
    max_prompts: int | None  # per category; None: every record
    seed: int
    quantile: float  # of the per-prompt sums, reported beside their max (Ĥ) and mean

    def problems(self) -> list[Problem]:
        found: list[Problem] = [] if self.samples >= 0 else [("samples", "an integer >= 0 (0: off)")]
        if self.max_new_tokens <= CUT_MARGIN_TOKENS:
            found.append(("max_new_tokens", f"an integer > {CUT_MARGIN_TOKENS}"))
        if self.max_prompts is not None and self.max_prompts < 1:
            found.append(("max_prompts", "null (every record) or an integer >= 1"))
        if not 0 < self.quantile < 1:
            found.append(("quantile", "a quantile in (0, 1)"))
        return found


@dataclass(frozen=True)
class AnalysisSettings:
    """What the analysis itself reads of ``evaluator.generalization`` (``GeneralizationSettings.analysis``)."""

    weighting: str
    delta_form: str
    n_negatives: int
    max_samples: int | None
    seed: int
    batch_size: int
    convergence_sizes: Sequence[int]
    convergence_repeats: int
    entropy: EntropySettings


@dataclass(frozen=True, kw_only=True)
class GeneralizationSettings(Settings):
    """``evaluator.generalization``: whether the analysis runs, how the reasoner writes r, the critic's rows,
    the JS terms' encoder, and the analysis' own settings."""

    enabled: bool
    reasoning: GenerationSettings  # how the reasoner writes r from x
    critic_max_length: int  # tokens of a critic row
    encoder: str | None  # None: the packaged all-MiniLM-L6-v2
    encoder_fallback: bool  # the packaged MiniLM stands in when the encoder is not available locally
    layer: int
    pooling: str
    max_length: int
    weighting: str
    delta_form: str
    n_negatives: int
    max_samples: int | None
    seed: int
    batch_size: int
    convergence_sizes: tuple[int, ...]
    convergence_repeats: int
    entropy: EntropySettings

    def problems(self) -> list[Problem]:
        found: list[Problem] = [
            (key, "an integer >= 1")
            for key in ("critic_max_length", "max_length", "n_negatives", "batch_size", "convergence_repeats")
            if getattr(self, key) < 1
        ]
        if self.max_samples is not None and self.max_samples < 1:
            found.append(("max_samples", "null (every sample) or an integer >= 1"))
        if not self.convergence_sizes or min(self.convergence_sizes) < 1:
            found.append(("convergence_sizes", "subsample sizes >= 1"))
        return found

    def analysis(self) -> AnalysisSettings:
        return AnalysisSettings(
            self.weighting,
            self.delta_form,
            self.n_negatives,
            self.max_samples,
            self.seed,
            self.batch_size,
            self.convergence_sizes,
            self.convergence_repeats,
            self.entropy,
        )
