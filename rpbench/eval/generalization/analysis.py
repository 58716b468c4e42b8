"""The RPGBench generalization analysis of one evaluated model, per category as the paper estimates it.

Categories are ``meta["category"]`` (``IDTest``, and each shift subtype: german, ..., Literature, ...,
TurnLevelComposition, ...); every shifted category is compared with ``IDTest``. Per category: EMI and
R-EMI (sampled CLUB, ``emi``), with the critic scoring x as the pxy prompt (R-EMI: with the reasoning
r's core features; EMI: without) and y in its target layout (``Critic``); per shifted category: JS per
input field, δ_P / δ_Q, EMID / R-EMID (ID minus shifted, positive = degradation), Theorem 3.4's bound
and the EMID code's bound, the bound's convergence on subsamples. Every sample of a category is a
positive; negatives are at most ``n_negatives`` off-diagonal pairs (the authors' 1000); ``max_samples``
caps the positives per category (seeded subsample; null = every sample, the paper). Pairs are scored on
demand and once (``scoring.PairScorer``). Roll-ups per shift type (user, character, composition) are the
means over its categories (``by_shift``), beside the per-category numbers.

Ĥ (``entropy``, with sampled responses): max over the ID and shifted prompts of H(P_θ(· | x)) + H(P(· | x)):
the evaluated model's entropy from its own samples under its own prompt, and the golden conditional's
under the critic from the critic's own samples (each a length-normalised Monte-Carlo estimate).
Records whose prediction is empty have no text embedding: they are left out and counted per category.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from rpbench.data.chat import ChatRenderer
from rpbench.data.records import EvalExample, Turn
from rpbench.data.remid_prompts import RemidPrompts, RolePlayInput
from rpbench.eval.generalization.bound import bound_of, code_bound_of, entropy_bound
from rpbench.eval.generalization.convergence import bound_convergence, remid_of_subsamples
from rpbench.eval.generalization.embed import TextEmbedder
from rpbench.eval.generalization.emi import sampled_club_mi
from rpbench.eval.generalization.scoring import PairScorer, conditional_entropy
from rpbench.eval.generalization.shift import embed_split, shift_severity

ID_CATEGORY = "IDTest"


@dataclass(frozen=True)
class EntropySettings:
    """``evaluator.generalization.entropy`` (conf/evaluator/rpgbench.yaml documents each)."""

    samples: int  # K per prompt; 0: off (Ĥ = 1)
    max_new_tokens: int
    max_prompts: int | None  # per category; None: every record
    seed: int

    def __post_init__(self) -> None:
        if self.samples < 0 or self.max_new_tokens < 1 or (self.max_prompts is not None and self.max_prompts < 1):
            raise ValueError(
                f"evaluator.generalization.entropy: samples must be >= 0 (0: off), max_new_tokens >= 1 and "
                f"max_prompts >= 1 or null; got {self}"
            )


@dataclass(frozen=True)
class AnalysisSettings:
    """``evaluator.generalization`` (conf/evaluator/rpgbench.yaml documents each)."""

    weighting: str
    delta_form: str
    n_negatives: int
    max_samples: int | None
    seed: int
    batch_size: int
    convergence_sizes: Sequence[int]
    convergence_repeats: int
    entropy: EntropySettings


@dataclass(frozen=True)
class Critic:
    """The model scoring ℓ(y | x [, r]) in the pxy layout of ``prompts`` (``description`` names it)."""

    model: torch.nn.Module
    renderer: ChatRenderer
    prompts: RemidPrompts
    description: str
    is_evaluated_model: bool

    def context(self, example: EvalExample, reasoning: str | None) -> list[Turn]:
        x = RolePlayInput(**example.meta["x"])
        return self.prompts.pxy(x, None if reasoning is None else self.prompts.core_features(reasoning))


def split_by_category(examples: Sequence[EvalExample]) -> dict[str, list[int]]:
    """category -> indices of its records; IDTest first. No IDTest records, or no shifted one, is an error."""
    splits: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        if "category" not in e.meta:
            raise ValueError(f"record {e.id!r}: meta lacks 'category'; expected an RPGBench test record")
        splits.setdefault(str(e.meta["category"]), []).append(i)
    if ID_CATEGORY not in splits or len(splits) < 2:
        raise ValueError(
            f"the generalization analysis needs {ID_CATEGORY} records and shifted ones, got {sorted(splits)}"
        )
    return {ID_CATEGORY: splits.pop(ID_CATEGORY), **splits}


def _subsample(rows: list[int], limit: int | None, seed: int) -> list[int]:
    if limit is None or len(rows) <= limit:
        return rows
    return sorted(np.random.default_rng(seed).choice(rows, size=limit, replace=False).tolist())


def entropy_prompts(examples: Sequence[EvalExample], settings: EntropySettings) -> list[EvalExample]:
    """The records Ĥ is estimated on: per category at most ``max_prompts`` (seeded); none when off."""
    if not settings.samples:
        return []
    rows = [
        i
        for k, split in enumerate(split_by_category(examples).values())
        for i in _subsample(split, settings.max_prompts, settings.seed + k)
    ]
    return [examples[i] for i in sorted(rows)]


@dataclass(frozen=True)
class EntropyInputs:
    """Sampled responses for Ĥ: the evaluated model's own (under its prompt), the critic's own (pxy prompt)."""

    model: torch.nn.Module
    renderer: ChatRenderer
    model_samples: Mapping[str, Sequence[str]]
    critic_samples: Mapping[str, Sequence[str]]


def category_entropies(
    critic: Critic,
    examples: Sequence[EvalExample],
    reasoning: Mapping[str, str] | None,
    inputs: EntropyInputs,
    batch_size: int,
) -> dict[str, dict[str, torch.Tensor]]:
    """category -> {"model": [n], "golden": [n]} per-prompt entropies (nats per token) on the sampled records."""
    chosen = [e for e in examples if e.id in inputs.model_samples]
    out = {}
    for category, rows in split_by_category(chosen).items():
        picked = [chosen[i] for i in rows]
        out[category] = {
            "model": conditional_entropy(
                inputs.model,
                inputs.renderer,
                [e.prompt for e in picked],
                [inputs.model_samples[e.id] for e in picked],
                batch_size,
            ),
            "golden": conditional_entropy(
                critic.model,
                critic.renderer,
                [critic.context(e, None if reasoning is None else reasoning[e.id]) for e in picked],
                [inputs.critic_samples[e.id] for e in picked],
                batch_size,
            ),
        }
    return out


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values))


def analyze(
    examples: Sequence[EvalExample],
    predictions: Mapping[str, str],
    critic: Critic,
    embedder: TextEmbedder,
    settings: AnalysisSettings,
    reasoning: Mapping[str, str] | None,
    reasoning_source: str,
    entropy: EntropyInputs | None = None,
) -> dict[str, Any]:
    """metrics.json's generalization keys (module docstring): ``jsd``, ``emi``, ``emid``, ``r_emi``, ``r_emid``,
    ``bound`` (Theorem 3.4), ``bound_emid_code``, ``convergence``, ``perplexity``, ``entropy`` (with samples),
    ``by_shift`` (roll-ups), plus the settings and counts."""
    s = settings
    split_by_category(examples)  # every record has a category, ID and shifted ones are present
    missing = [e.id for e in examples if e.id not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} test records have no prediction (first: {missing[:5]})")
    kept = [e for e in examples if predictions[e.id].strip()]
    excluded = Counter(str(e.meta["category"]) for e in examples if not predictions[e.id].strip())
    small = {c: len(rows) for c, rows in split_by_category(kept).items() if len(rows) < 2}
    if small:
        raise ValueError(
            f"too few records with a non-empty prediction per category for the analysis: {small} "
            f"(empty predictions left out: {dict(excluded)})"
        )
    splits = {
        category: [kept[i] for i in _subsample(rows, s.max_samples, s.seed + k)]
        for k, (category, rows) in enumerate(split_by_category(kept).items())
    }
    shift_of = {category: str(rows[0].meta["shift"]) for category, rows in splits.items()}
    conditions = {"plain": None, **({"reasoning": reasoning} if reasoning is not None else {})}
    scorers: dict[tuple[str, str], dict[str, PairScorer]] = {}
    embedded, ppl, emi = {}, {}, {cond: {} for cond in conditions}
    for category, chosen in splits.items():
        embedded[category] = embed_split(embedder, chosen, [predictions[e.id] for e in chosen])
        for cond, r in conditions.items():
            contexts = [critic.context(e, None if r is None else r[e.id]) for e in chosen]
            pair = {
                "model": PairScorer(
                    critic.model,
                    critic.renderer,
                    contexts,
                    [critic.prompts.target(predictions[e.id]) for e in chosen],
                    s.batch_size,
                ),
                "golden": PairScorer(
                    critic.model,
                    critic.renderer,
                    contexts,
                    [critic.prompts.target(e.reference) for e in chosen],
                    s.batch_size,
                ),
            }
            scorers[category, cond] = pair
            rows = range(len(chosen))
            mi_model = sampled_club_mi(pair["model"], rows, s.n_negatives, s.seed)
            mi_golden = sampled_club_mi(pair["golden"], rows, s.n_negatives, s.seed)
            emi[cond][category] = {
                "emi": mi_model - mi_golden,
                "mi_model": mi_model,
                "mi_golden": mi_golden,
                "n": len(chosen),
                "n_negatives": min(len(chosen) * (len(chosen) - 1), s.n_negatives),
            }
            with_r = "with_reasoning" if r is not None else "without_reasoning"
            ppl.setdefault(category, {})[with_r] = pair["golden"].perplexity(rows)
    entropies = category_entropies(critic, kept, reasoning, entropy, s.batch_size) if entropy else {}
    cond = "reasoning" if reasoning is not None else "plain"
    shifted = [c for c in splits if c != ID_CATEGORY]
    jsd, bound, code_bound, h_hat, convergence = {}, {}, {}, {}, {}
    for category in shifted:
        severity = shift_severity(embedded[ID_CATEGORY], embedded[category], s.weighting)
        jsd[category] = severity.as_dict()
        if entropies:
            both = [entropies[ID_CATEGORY], entropies[category]]
            h_hat[category] = entropy_bound(
                torch.cat([e["model"] for e in both]), torch.cat([e["golden"] for e in both])
            )
        bound[category] = bound_of(severity, h_hat.get(category), s.delta_form).as_dict()
        code_bound[category] = code_bound_of(severity)
        largest = min(len(splits[ID_CATEGORY]), len(splits[category]))
        sizes = sorted({n for n in s.convergence_sizes if 2 <= n <= largest} | {largest})
        idm, odm = scorers[ID_CATEGORY, cond], scorers[category, cond]
        empirical = remid_of_subsamples(idm["model"], idm["golden"], odm["model"], odm["golden"], s.n_negatives, s.seed)
        points = bound_convergence(
            embedded[ID_CATEGORY],
            embedded[category],
            empirical,
            sizes,
            s.seed,
            s.convergence_repeats,
            h_hat.get(category),
            s.delta_form,
            s.weighting,
        )
        convergence[category] = [
            {"n": p.n, "repeat": p.repeat, "bound": p.bound.value, "empirical": p.empirical} for p in points
        ]
    emid = {c: emi["plain"][ID_CATEGORY]["emi"] - emi["plain"][c]["emi"] for c in shifted}
    result: dict[str, Any] = {
        "reasoning_source": reasoning_source,
        "critic": critic.description,
        "critic_is_evaluated_model": critic.is_evaluated_model,
        "embedder": embedder.describe(),
        "settings": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in asdict(s).items()},
        "n_per_category": {c: len(rows) for c, rows in splits.items()},
        "n_records_per_category": dict(Counter(str(e.meta["category"]) for e in examples)),
        "excluded_empty_predictions": dict(excluded),
        "n_truncated_texts": sum(e.n_truncated for e in embedded.values()),
        "negatives": (
            "the same seeded off-diagonal pairs for the model's and the golden MI of a category (the authors draw "
            "new pairs per MI; sharing them lowers the variance of EMI)"
        ),
        "jsd": jsd,
        "emi": emi["plain"],
        "emid": emid,
        "bound": bound,
        "bound_form": (
            f"Theorem 3.4: sqrt(2/3) · Ĥ · Σ sqrt(JS) + output term ({s.delta_form} form), Ĥ "
            + ("estimated from sampled responses" if entropies else "= 1 (not estimated: entropy.samples is 0)")
        ),
        "bound_emid_code": code_bound,
        "bound_emid_code_form": "the EMID code's scale-adjusted bound: Σ sqrt(JS) + δ_P^¼ + δ_Q^¼",
        "convergence": {"empirical": "r_emid" if reasoning is not None else "emid", "points": convergence},
        "perplexity": ppl,
    }
    if entropies:
        result["entropy"] = {
            "h_hat": h_hat,
            "per_category": {
                c: {k: {"n_prompts": len(v), "mean": float(v.mean()), "max": float(v.max())} for k, v in e.items()}
                for c, e in entropies.items()
            },
        }
    if reasoning is not None:
        result["r_emi"] = emi["reasoning"]
        result["r_emid"] = {c: emi["reasoning"][ID_CATEGORY]["emi"] - emi["reasoning"][c]["emi"] for c in shifted}
    result["by_shift"] = rollups(result, shift_of)
    for category, values in ppl.items():
        if not all(math.isfinite(v) for v in values.values()):
            raise ValueError(f"non-finite perplexity on {category}: {values}")
    return result


def rollups(result: Mapping[str, Any], shift_of: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """shift type -> the mean over its categories of each per-category number, with the categories and n."""
    out: dict[str, dict[str, Any]] = {}
    for shift in dict.fromkeys(shift_of.values()):
        cats = [c for c, sh in shift_of.items() if sh == shift]
        entry: dict[str, Any] = {"categories": cats, "n": sum(result["n_per_category"][c] for c in cats)}
        for key in ("emi", "r_emi"):
            if key in result:
                entry[key] = _mean([result[key][c]["emi"] for c in cats])
        for key in ("emid", "r_emid", "bound_emid_code"):
            if key in result and all(c in result[key] for c in cats):
                entry[key] = _mean([result[key][c] for c in cats])
        if all(c in result["bound"] for c in cats):
            entry["bound"] = _mean([result["bound"][c]["value"] for c in cats])
            entry["js_severity"] = _mean(
                [sum(result["jsd"][c][f] for f in ("user", "character", "dialogue")) for c in cats]
            )
        out[shift] = entry
    return out
