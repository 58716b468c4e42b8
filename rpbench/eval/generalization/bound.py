"""Theorem 3.4's upper bound on R-EMID, and the EMID code's scale-adjusted bound.

    R-EMID <= sqrt(2/3) · Ĥ · Σ_{s ∈ user, character, dialogue} sqrt(JS_s) + output term

with JS_s the RJSD of field s between ID and the shifted split, and δ_P / δ_Q the RJSD of model
vs golden responses on ID / on the shifted split. Output term forms (``delta_form``):
``"sum"``: 8 · (δ_P + δ_Q)^¼ (Δ = δ_P + δ_Q: Theorem 3.4 as the paper states it, the default);
``"max"``: 8 · max(δ_P, δ_Q)^¼ (Δ = max, as the EMID theorem);
``"code"``: 4 · (δ_P^¼ + δ_Q^¼) (the EMID code's "true" bound), <= the "max" form <= the "sum" form.
Ĥ (``entropy``): None means the scale-adjusted form, Ĥ = 1; a number is an estimate, e.g.
``entropy_bound`` of per-prompt Monte-Carlo entropies. ``emid_code_bound`` is what the EMID code
reports for its correlations (every coefficient 1). JS terms may be slightly negative from rounding
(|x| <= NUMERICAL_TOLERANCE, taken as 0); a clearly negative one (unequal split sizes under the
"trace" weighting, see ``rjsd``) is an error, as its root is undefined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from rpbench.eval.generalization.severity import INPUT_FIELDS, ShiftSeverity

DeltaForm = Literal["max", "sum", "code"]
NUMERICAL_TOLERANCE = 1e-9
INPUT_COEFFICIENT = math.sqrt(2 / 3)


def _root(value: float, power: float, name: str) -> float:
    if not math.isfinite(value) or value < -NUMERICAL_TOLERANCE:
        raise ValueError(
            f"{name} = {value!r}: a JS term must be >= 0 to take its root (a negative RJSD comes from "
            "unequal set sizes under weighting='trace'; subsample equal sizes or use weighting='equal')"
        )
    return max(value, 0.0) ** power


def _input_sum(js: Mapping[str, float]) -> float:
    if set(js) != set(INPUT_FIELDS):
        raise ValueError(f"JS terms must be exactly {list(INPUT_FIELDS)}, got {sorted(js)}")
    return sum(_root(js[name], 0.5, f"JS[{name}]") for name in INPUT_FIELDS)


def output_terms(delta_p: float, delta_q: float) -> dict[str, float]:
    """The three output-term forms (module docstring) for δ_P, δ_Q."""
    p, q = _root(delta_p, 0.25, "delta_p"), _root(delta_q, 0.25, "delta_q")
    return {
        "max": 8 * max(p, q),
        "sum": 8 * _root(max(delta_p, 0.0) + max(delta_q, 0.0), 0.25, "delta_p + delta_q"),
        "code": 4 * (p + q),
    }


@dataclass(frozen=True)
class Bound:
    value: float
    input_term: float  # sqrt(2/3) · Ĥ · Σ sqrt(JS_s)
    output_term: float
    entropy: float
    entropy_form: str  # "scale_adjusted" (Ĥ = 1) or "estimated"
    delta_form: str
    output_terms: dict[str, float]  # every form, for reference

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def remid_bound(
    js: Mapping[str, float],
    delta_p: float,
    delta_q: float,
    entropy: float | None,
    delta_form: DeltaForm,
) -> Bound:
    """Theorem 3.4's bound from the three input JS terms and the two output terms (module docstring)."""
    if entropy is not None and not (math.isfinite(entropy) and entropy >= 0):
        raise ValueError(f"entropy must be a finite non-negative number, got {entropy!r}")
    terms = output_terms(delta_p, delta_q)
    if delta_form not in terms:
        raise ValueError(f"delta_form must be one of {sorted(terms)}, got {delta_form!r}")
    h = 1.0 if entropy is None else float(entropy)
    input_term = INPUT_COEFFICIENT * h * _input_sum(js)
    return Bound(
        input_term + terms[delta_form],
        input_term,
        terms[delta_form],
        h,
        "scale_adjusted" if entropy is None else "estimated",
        delta_form,
        terms,
    )


def bound_of(severity: ShiftSeverity, entropy: float | None, delta_form: DeltaForm) -> Bound:
    return remid_bound(severity.input_terms(), severity.delta_p, severity.delta_q, entropy, delta_form)


def emid_code_bound(js: Mapping[str, float], delta_p: float, delta_q: float) -> float:
    """The EMID code's reported (scale-adjusted) bound: Σ sqrt(JS_s) + δ_P^¼ + δ_Q^¼."""
    return _input_sum(js) + _root(delta_p, 0.25, "delta_p") + _root(delta_q, 0.25, "delta_q")


def code_bound_of(severity: ShiftSeverity) -> float:
    return emid_code_bound(severity.input_terms(), severity.delta_p, severity.delta_q)


def entropy_bound(model_entropy: torch.Tensor, golden_entropy: torch.Tensor) -> float:
    """Ĥ = max over prompts x of [H(P_θ(· | x)) + H(P(· | x))] from per-prompt estimates [n] each.

    ``model_entropy``: the evaluated model scoring its own samples; ``golden_entropy``: the critic
    (stand-in for the golden conditional) scoring its own samples (``scoring.conditional_entropy``).
    """
    if model_entropy.shape != golden_entropy.shape or model_entropy.ndim != 1 or not model_entropy.numel():
        raise ValueError(
            f"expected two equally long non-empty [n] entropy vectors, got {tuple(model_entropy.shape)} "
            f"and {tuple(golden_entropy.shape)}"
        )
    return float((model_entropy.double() + golden_entropy.double()).max())
