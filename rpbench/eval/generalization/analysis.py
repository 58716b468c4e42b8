"""The RPGBench generalization analysis of one evaluated model, per category as the paper estimates it.

Categories are ``meta["category"]`` (``IDTest``, and each shift subtype: german, ..., Literature, ...,
TurnLevelComposition, ...); every shifted category is compared with ``IDTest``. Per category, by sampled
CLUB (``emi``), each critic scoring x as the pxy prompt and y in its target layout (``Critic``): R-EMI (the
critic, with the reasoning r's core features); the same critic without r (``emi_critic_without_r``: a
critic trained with r, prompted off its training distribution); with a plain critic trained without r,
the paper's naive EMI (``emi``). Per shifted category: JS per input field, δ_P / δ_Q, EMID / R-EMID (ID
minus shifted, positive = degradation; ``emid_critic_without_r`` likewise), Theorem 3.4's bound
and the EMID code's bound, the bound's convergence on subsamples. Every sample of a category is a
positive; negatives are at most ``n_negatives`` off-diagonal pairs (the authors' 1000); ``max_samples``
caps the positives per category (seeded subsample; null = every sample, the paper). Pairs are scored on
demand and once (``scoring.PairScorer``). Roll-ups per shift type (user, character, composition) are the
means over its categories (``by_shift``), beside the per-category numbers.

Ĥ (``entropy``, with sampled responses): max over the ID and shifted prompts of H(P_θ(· | x)) + H(P(· | x)):
the evaluated model's entropy from its own samples under its own prompt, and the golden conditional's
under the critic from the critic's own samples (each a length-normalised Monte-Carlo estimate; the
critic's target header is context, not scored; a sample cut at ``max_new_tokens`` is scored without an
end-of-turn token). A max of noisy K-sample estimates: the mean and ``quantile`` of the same per-prompt
sums are reported beside it. Records whose prediction is empty are left out (``replied_records``, the
records WinRate judges too) and counted per category.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from rpbench.data.chat import ChatRenderer
from rpbench.data.records import EvalExample, Turn
from rpbench.data.remid_prompts import RemidPrompts, RolePlayInput
from rpbench.data.rpgbench import replied_records
from rpbench.eval.generalization.bound import bound_of, code_bound_of, entropy_bound
from rpbench.eval.generalization.convergence import bound_convergence, remid_of_subsamples
from rpbench.eval.generalization.embed import TextEmbedder
from rpbench.eval.generalization.emi import sampled_club_mi
from rpbench.eval.generalization.scoring import PairScorer, SampledResponse, conditional_entropy
from rpbench.eval.generalization.settings import CUT_MARGIN_TOKENS, AnalysisSettings, EntropySettings
from rpbench.eval.generalization.severity import embed_split, shift_severity

ID_CATEGORY = "IDTest"
# what each condition (critic, reasoning) is reported as: EMI table, EMID table, perplexity key
CONDITIONS = {
    "critic_without_r": ("emi_critic_without_r", "emid_critic_without_r", "critic_without_r"),
    "reasoning": ("r_emi", "r_emid", "with_reasoning"),
    "plain": ("emi", "emid", "without_reasoning"),
}


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


def as_sampled(tokenizer, text: str, max_new_tokens: int, header: str | None) -> SampledResponse:
    """A sample as scored: ``header`` (with the whitespace around it) kept out of the target when the sample
    starts with it; cut when its re-encoded text reaches the limit (``CUT_MARGIN_TOKENS``)."""
    found = re.match(rf"\s*{re.escape(header)}\s*", text) if header else None
    n_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return SampledResponse(text, found.group(0) if found else "", n_tokens < max_new_tokens - CUT_MARGIN_TOKENS)


def category_entropies(
    critic: Critic,
    examples: Sequence[EvalExample],
    reasoning: Mapping[str, str] | None,
    inputs: EntropyInputs,
    batch_size: int,
    max_new_tokens: int,
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, dict[str, int]]]:
    """category -> {"model": [n], "golden": [n]} per-prompt entropies (nats per token) on the sampled records,
    and category -> counts of samples, of those cut at ``max_new_tokens``, of critic samples without its
    target header."""
    chosen = [e for e in examples if e.id in inputs.model_samples]
    out, counts = {}, {}
    for category, rows in split_by_category(chosen).items():
        picked = [chosen[i] for i in rows]
        own = [
            [as_sampled(inputs.renderer.tokenizer, y, max_new_tokens, None) for y in inputs.model_samples[e.id]]
            for e in picked
        ]
        header = critic.prompts.response_header
        golden = [
            [as_sampled(critic.renderer.tokenizer, y, max_new_tokens, header) for y in inputs.critic_samples[e.id]]
            for e in picked
        ]
        out[category] = {
            "model": conditional_entropy(inputs.model, inputs.renderer, [e.prompt for e in picked], own, batch_size),
            "golden": conditional_entropy(
                critic.model,
                critic.renderer,
                [critic.context(e, None if reasoning is None else reasoning[e.id]) for e in picked],
                golden,
                batch_size,
            ),
        }
        counts[category] = {
            "model_samples": sum(map(len, own)),
            "model_cut": sum(not y.ended for ys in own for y in ys),
            "critic_samples": sum(map(len, golden)),
            "critic_cut": sum(not y.ended for ys in golden for y in ys),
            "critic_without_header": sum(not y.header for ys in golden for y in ys),
        }
    return out, counts


def entropy_sums(both: Sequence[Mapping[str, torch.Tensor]], quantile: float) -> dict[str, float]:
    """Over the prompts of ``both`` categories, H(P_θ(· | x)) + H(P(· | x)): its max (Ĥ, ``entropy_bound``), mean
    and ``quantile`` (linear interpolation between order statistics, as numpy's default)."""
    sums = torch.cat([e["model"] for e in both]).double() + torch.cat([e["golden"] for e in both]).double()
    return {
        "max": entropy_bound(torch.cat([e["model"] for e in both]), torch.cat([e["golden"] for e in both])),
        "mean": float(sums.mean()),
        "quantile": float(torch.quantile(sums, quantile)),
    }


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
    plain_critic: Critic | None = None,
) -> dict[str, Any]:
    """metrics.json's generalization keys (module docstring): ``jsd``, ``emi_critic_without_r`` /
    ``emid_critic_without_r``, ``r_emi`` / ``r_emid`` (with reasoning), ``emi`` / ``emid`` (with a plain critic),
    ``bound`` (Theorem 3.4), ``bound_emid_code``, ``convergence``, ``perplexity``, ``entropy`` (with samples),
    ``by_shift`` (roll-ups), plus the settings and counts."""
    s = settings
    split_by_category(examples)  # every record has a category, ID and shifted ones are present
    replied = replied_records(examples, predictions)
    kept, excluded = replied.examples, replied.excluded
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
    conditions = {"critic_without_r": (critic, None)}
    if reasoning is not None:
        conditions["reasoning"] = (critic, reasoning)
    if plain_critic is not None:
        conditions["plain"] = (plain_critic, None)
    scorers: dict[tuple[str, str], dict[str, PairScorer]] = {}
    embedded, ppl, emi = {}, {}, {cond: {} for cond in conditions}
    for category, chosen in splits.items():
        embedded[category] = embed_split(embedder, chosen, [predictions[e.id] for e in chosen])
        for cond, (scoring, r) in conditions.items():
            contexts = [scoring.context(e, None if r is None else r[e.id]) for e in chosen]
            pair = {
                "model": PairScorer(
                    scoring.model,
                    scoring.renderer,
                    contexts,
                    [scoring.prompts.target(predictions[e.id]) for e in chosen],
                    s.batch_size,
                ),
                "golden": PairScorer(
                    scoring.model,
                    scoring.renderer,
                    contexts,
                    [scoring.prompts.target(e.reference) for e in chosen],
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
                "excluded_empty_predictions": excluded[category],
            }
            ppl.setdefault(category, {})[CONDITIONS[cond][2]] = pair["golden"].perplexity(rows)
    entropies, sample_counts = (
        category_entropies(critic, kept, reasoning, entropy, s.batch_size, s.entropy.max_new_tokens)
        if entropy
        else ({}, {})
    )
    cond = "reasoning" if reasoning is not None else "critic_without_r"
    shifted = [c for c in splits if c != ID_CATEGORY]
    jsd, bound, code_bound, h_hat, convergence = {}, {}, {}, {}, {}
    for category in shifted:
        severity = shift_severity(embedded[ID_CATEGORY], embedded[category], s.weighting)
        jsd[category] = severity.as_dict()
        if entropies:
            h_hat[category] = entropy_sums([entropies[ID_CATEGORY], entropies[category]], s.entropy.quantile)
        h = h_hat[category]["max"] if entropies else None
        bound[category] = bound_of(severity, h, s.delta_form).as_dict()
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
            h,
            s.delta_form,
            s.weighting,
        )
        convergence[category] = [
            {"n": p.n, "repeat": p.repeat, "bound": p.bound.value, "empirical": p.empirical} for p in points
        ]
    result: dict[str, Any] = {
        "reasoning_source": reasoning_source,
        "critic": critic.description,
        "critic_is_evaluated_model": critic.is_evaluated_model,
        "plain_critic": None if plain_critic is None else plain_critic.description,
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
        "bound": bound,
        "bound_form": (
            f"Theorem 3.4: sqrt(2/3) · Ĥ · Σ sqrt(JS) + output term ({s.delta_form} form), Ĥ "
            + ("estimated from sampled responses" if entropies else "= 1 (not estimated: entropy.samples is 0)")
        ),
        "bound_emid_code": code_bound,
        "bound_emid_code_form": "the EMID code's scale-adjusted bound: Σ sqrt(JS) + δ_P^¼ + δ_Q^¼",
        "convergence": {"empirical": CONDITIONS[cond][1], "points": convergence},
        "perplexity": ppl,
    }
    for key, table in emi.items():
        emi_key, emid_key, _ = CONDITIONS[key]
        result[emi_key] = table
        result[emid_key] = {c: table[ID_CATEGORY]["emi"] - table[c]["emi"] for c in shifted}
    if entropies:
        result["entropy"] = {
            "h_hat": {c: v["max"] for c, v in h_hat.items()},
            "h_hat_mean": {c: v["mean"] for c, v in h_hat.items()},
            "h_hat_quantile": {c: v["quantile"] for c, v in h_hat.items()},
            "quantile": s.entropy.quantile,
            "per_category": {
                c: {k: {"n_prompts": len(v), "mean": float(v.mean()), "max": float(v.max())} for k, v in e.items()}
                for c, e in entropies.items()
            },
            "samples": sample_counts,
        }
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
        for key in (v[0] for v in CONDITIONS.values()):
            if key in result:
                entry[key] = _mean([result[key][c]["emi"] for c in cats])
        for key in (*(v[1] for v in CONDITIONS.values()), "bound_emid_code"):
            if key in result and all(c in result[key] for c in cats):
                entry[key] = _mean([result[key][c] for c in cats])
        if all(c in result["bound"] for c in cats):
            entry["bound"] = _mean([result["bound"][c]["value"] for c in cats])
            entry["js_severity"] = _mean(
                [sum(result["jsd"][c][f] for f in ("user", "character", "dialogue")) for c in cats]
            )
        out[shift] = entry
    return out
