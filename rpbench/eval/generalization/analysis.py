"""The RPGBench generalization analysis of one evaluated model: shift severity (JS), EMI / EMID,
R-EMI / R-EMID, the bound, its convergence and ground-truth perplexity, from the test records, the
model's predictions and a critic LM (the evaluated model).

Splits are keyed by ``meta["shift"]``: ``in_distribution`` is ID, every other shift is compared with
it. Reasoning r (for R-EMI) comes from ``meta["reasoning"]`` of every record, or from ``reasoning``
given by the caller (a generator); with neither only plain EMI is computed and ``reasoning_source``
says so. The critic log-probs of a split are computed once as full [n, n] matrices over at most
``max_pairs_n`` samples per split (a seeded subsample; EMI, EMID and the convergence curve all read
them), so every number on one split shares its samples. Records whose prediction is empty (or only
whitespace) have no text embedding: they are left out and counted per shift
(``excluded_empty_predictions``); a split left with fewer than 2 records is an error.

The bound comes in two forms. ``bound``: the scale-adjusted form, Ĥ = 1 (what the EMID code reports).
``bound_estimated``, with ``entropy_samples`` (record id -> K responses sampled from the model at
temperature 1, for the records ``entropy_prompts`` picks): Ĥ = max over the ID and shifted prompts x
of H(P_θ(· | x)) + H(P(· | x)), each a length-normalised Monte-Carlo entropy (``conditional_entropy``:
−mean_k ℓ(ŷ_k | x)). H(P(· | x)), the golden conditional, is estimated under the critic from the
critic's own samples; the critic is the evaluated model, so its samples and scores are the model's
and the two terms coincide (Ĥ = 2 · max_x H(P_θ(· | x))). ``entropy`` reports Ĥ and the per-split
entropies.
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
from rpbench.data.records import EvalExample
from rpbench.eval.generalization.bound import bound_of, entropy_bound
from rpbench.eval.generalization.convergence import bound_convergence, remid_from_matrices
from rpbench.eval.generalization.embed import TextEmbedder
from rpbench.eval.generalization.emi import club_mi_matrix
from rpbench.eval.generalization.scoring import conditional_entropy, pair_logp_matrix, perplexity
from rpbench.eval.generalization.shift import embed_split, shift_severity

ID_SHIFT = "in_distribution"


@dataclass(frozen=True)
class EntropySettings:
    """``evaluator.generalization.entropy`` (conf/evaluator/rpgbench.yaml documents each)."""

    samples: int  # K per prompt; 0: off (the scale-adjusted bound only)
    max_new_tokens: int
    max_prompts: int | None  # per split; None: every record
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
    seed: int
    max_pairs_n: int
    batch_size: int
    convergence_sizes: Sequence[int]
    convergence_repeats: int
    entropy: EntropySettings


def split_by_shift(examples: Sequence[EvalExample]) -> dict[str, list[int]]:
    """shift -> indices of its records; ID first. No ID records, or no shifted one, is an error."""
    splits: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        if "shift" not in e.meta:
            raise ValueError(f"record {e.id!r}: meta lacks 'shift'; expected an RPGBench test record")
        splits.setdefault(str(e.meta["shift"]), []).append(i)
    if ID_SHIFT not in splits or len(splits) < 2:
        raise ValueError(f"the generalization analysis needs {ID_SHIFT} records and shifted ones, got {sorted(splits)}")
    return {ID_SHIFT: splits.pop(ID_SHIFT), **dict(sorted(splits.items()))}


def record_reasoning(examples: Sequence[EvalExample]) -> list[str] | None:
    """Every record's ``meta["reasoning"]``, or None when no record has one; some without is an error."""
    present = [e.id for e in examples if e.meta.get("reasoning")]
    if not present:
        return None
    if len(present) != len(examples):
        absent = [e.id for e in examples if not e.meta.get("reasoning")]
        raise ValueError(f"{len(absent)} test records lack the 'reasoning' field others have (first: {absent[:5]})")
    return [str(e.meta["reasoning"]) for e in examples]


def _subsample(rows: list[int], limit: int, seed: int) -> list[int]:
    if len(rows) <= limit:
        return rows
    return sorted(np.random.default_rng(seed).choice(rows, size=limit, replace=False).tolist())


def entropy_prompts(examples: Sequence[EvalExample], settings: EntropySettings) -> list[EvalExample]:
    """The records Ĥ is estimated on: per shift at most ``max_prompts`` (seeded); none when off."""
    if not settings.samples:
        return []
    rows = [
        i
        for k, split in enumerate(split_by_shift(examples).values())
        for i in (split if settings.max_prompts is None else _subsample(split, settings.max_prompts, settings.seed + k))
    ]
    return [examples[i] for i in sorted(rows)]


def split_entropies(
    critic: torch.nn.Module,
    renderer: ChatRenderer,
    examples: Sequence[EvalExample],
    samples: Mapping[str, Sequence[str]],
    batch_size: int,
) -> dict[str, torch.Tensor]:
    """shift -> [n] per-prompt H(P_θ(· | x)) (nats per token) over the records that have ``samples``."""
    chosen = [e for e in examples if e.id in samples]
    return {
        shift: conditional_entropy(
            critic, renderer, [chosen[i].prompt for i in rows], [samples[chosen[i].id] for i in rows], None, batch_size
        )
        for shift, rows in split_by_shift(chosen).items()
    }


def estimated_entropy(entropies: Mapping[str, torch.Tensor], shift: str) -> float:
    """Ĥ for ID vs ``shift``: max over both splits' prompts of H(P_θ(· | x)) + H(P(· | x)) (module docstring)."""
    model = torch.cat([entropies[ID_SHIFT], entropies[shift]])
    golden = model  # the critic (golden conditional's stand-in) is the evaluated model: same samples, same scores
    return entropy_bound(model, golden)


def emi_from(model_m: torch.Tensor, golden_m: torch.Tensor, n_negatives: int, seed: int) -> dict[str, float]:
    mi_model, mi_golden = club_mi_matrix(model_m, n_negatives, seed), club_mi_matrix(golden_m, n_negatives, seed)
    return {"emi": mi_model - mi_golden, "mi_model": mi_model, "mi_golden": mi_golden, "n": len(model_m)}


def analyze(
    examples: Sequence[EvalExample],
    predictions: Mapping[str, str],
    critic: torch.nn.Module,
    renderer: ChatRenderer,
    embedder: TextEmbedder,
    settings: AnalysisSettings,
    reasoning: Sequence[str] | None,
    reasoning_source: str,
    entropy_samples: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """metrics.json's generalization keys: ``jsd``, ``emi``, ``emid``, ``r_emi``, ``r_emid``, ``bound``,
    ``bound_estimated`` and ``entropy`` (with ``entropy_samples``), ``convergence`` and ``perplexity``
    (module docstring), plus the settings and sample counts."""
    s = settings
    entropies = split_entropies(critic, renderer, examples, entropy_samples, s.batch_size) if entropy_samples else {}
    kept = [i for i, e in enumerate(examples) if predictions[e.id].strip()]
    excluded = Counter(str(e.meta.get("shift")) for i, e in enumerate(examples) if i not in set(kept))
    examples = [examples[i] for i in kept]
    reasoning = None if reasoning is None else [reasoning[i] for i in kept]
    small = {shift: len(rows) for shift, rows in split_by_shift(examples).items() if len(rows) < 2}
    if small:
        raise ValueError(
            f"too few records with a non-empty prediction per shift for the analysis: {small} "
            f"(empty predictions left out: {dict(excluded)})"
        )
    splits = {
        shift: _subsample(rows, s.max_pairs_n, s.seed + k)
        for k, (shift, rows) in enumerate(split_by_shift(examples).items())
    }
    model_resp = [predictions[e.id] for e in examples]
    golden = [e.reference for e in examples]
    prompts = [e.prompt for e in examples]

    def pick(values, rows):
        return None if values is None else [values[i] for i in rows]

    embedded, matrices, ppl = {}, {}, {}
    for shift, rows in splits.items():
        chosen = [examples[i] for i in rows]
        embedded[shift] = embed_split(embedder, chosen, pick(model_resp, rows))
        for cond, r in (("plain", None), ("reasoning", pick(reasoning, rows))):
            if cond == "reasoning" and r is None:
                continue
            args = (critic, renderer, pick(prompts, rows))
            matrices[shift, cond] = {
                "model": pair_logp_matrix(*args, pick(model_resp, rows), r, s.batch_size),
                "golden": pair_logp_matrix(*args, pick(golden, rows), r, s.batch_size),
            }
            ppl.setdefault(shift, {})[f"{'with' if r else 'without'}_reasoning"] = perplexity(
                *args, pick(golden, rows), r, s.batch_size
            )
    emi = {
        shift: emi_from(m["model"], m["golden"], s.n_negatives, s.seed)
        for (shift, c), m in matrices.items()
        if c == "plain"
    }
    r_emi = {
        shift: emi_from(m["model"], m["golden"], s.n_negatives, s.seed)
        for (shift, c), m in matrices.items()
        if c == "reasoning"
    }
    shifted = [shift for shift in splits if shift != ID_SHIFT]
    jsd, bound, bound_estimated, h_hat, convergence = {}, {}, {}, {}, {}
    cond = "reasoning" if reasoning is not None else "plain"
    for shift in shifted:
        severity = shift_severity(embedded[ID_SHIFT], embedded[shift], s.weighting)
        jsd[shift] = severity.as_dict()
        bound[shift] = bound_of(severity, None, s.delta_form).as_dict()
        if entropies:
            h_hat[shift] = estimated_entropy(entropies, shift)
            bound_estimated[shift] = bound_of(severity, h_hat[shift], s.delta_form).as_dict()
        largest = min(len(splits[ID_SHIFT]), len(splits[shift]))
        sizes = sorted({n for n in s.convergence_sizes if 2 <= n <= largest} | {largest})
        idm, odm = matrices[ID_SHIFT, cond], matrices[shift, cond]
        empirical = remid_from_matrices(idm["model"], idm["golden"], odm["model"], odm["golden"], s.n_negatives, s.seed)
        points = bound_convergence(
            embedded[ID_SHIFT],
            embedded[shift],
            empirical,
            sizes,
            s.seed,
            s.convergence_repeats,
            delta_form=s.delta_form,
            weighting=s.weighting,
        )
        convergence[shift] = [
            {"n": p.n, "repeat": p.repeat, "bound": p.bound.value, "empirical": p.empirical} for p in points
        ]
    entropy_prompt_count = (
        "every prompt" if s.entropy.max_prompts is None else f"at most {s.entropy.max_prompts} prompts per split"
    )
    result: dict[str, Any] = {
        "reasoning_source": reasoning_source,
        "critic": "the evaluated model",
        "embedder": embedder.describe(),
        "settings": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in asdict(s).items()},
        "n_per_split": {shift: len(rows) for shift, rows in splits.items()},
        "excluded_empty_predictions": dict(excluded),
        "n_truncated_texts": sum(e.n_truncated for e in embedded.values()),
        "jsd": jsd,
        "emi": emi,
        "emid": {shift: emi[ID_SHIFT]["emi"] - emi[shift]["emi"] for shift in shifted},
        "bound": bound,
        "bound_form": "scale_adjusted (Ĥ = 1), delta form " + s.delta_form,
        "bound_estimated_form": (
            f"estimated (Ĥ from {s.entropy.samples} samples per prompt at temperature 1, at most "
            f"{s.entropy.max_new_tokens} new tokens, on {entropy_prompt_count}), delta form {s.delta_form}"
            if entropies
            else "not computed (entropy.samples: 0)"
        ),
        "convergence": {"empirical": "r_emid" if reasoning is not None else "emid", "points": convergence},
        "perplexity": ppl,
    }
    if entropies:
        result["bound_estimated"] = bound_estimated
        result["entropy"] = {
            "h_hat": h_hat,
            "golden_conditional": "the critic's own samples; the critic is the evaluated model, so the same entropies",
            "per_split": {
                shift: {"n_prompts": len(h), "mean": float(h.mean()), "max": float(h.max())}
                for shift, h in entropies.items()
            },
        }
    if reasoning is not None:
        result["r_emi"] = r_emi
        result["r_emid"] = {shift: r_emi[ID_SHIFT]["emi"] - r_emi[shift]["emi"] for shift in shifted}
    for shift, values in ppl.items():
        if not all(math.isfinite(v) for v in values.values()):
            raise ValueError(f"non-finite perplexity on {shift}: {values}")
    return result
