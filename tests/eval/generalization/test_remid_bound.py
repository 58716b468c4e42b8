"""Theorem 3.4's bound and the EMID code's bound, by hand."""

import math

import pytest
import torch

from rpbench.eval.generalization.bound import (
    bound_of,
    code_bound_of,
    emid_code_bound,
    entropy_bound,
    output_terms,
    remid_bound,
)
from rpbench.eval.generalization.severity import ShiftSeverity

JS = {"user": 0.04, "character": 0.09, "dialogue": 0.16}  # roots 0.2, 0.3, 0.4: sum 0.9
DELTA_P, DELTA_Q = 0.0016, 0.0081  # fourth roots 0.2, 0.3; sum 0.0097, whose fourth root is 0.31382890


def test_theorem_sum_form_by_hand_with_an_entropy_estimate():
    # Ĥ = 2: input term sqrt(2/3) · 2 · (0.2 + 0.3 + 0.4) = 0.81649658 · 1.8 = 1.46969385
    # Δ = δ_P + δ_Q = 0.0097: output term 8 · 0.0097^¼ = 8 · 0.31382890 = 2.51063119
    # bound = 1.46969385 + 2.51063119 = 3.98032504
    bound = remid_bound(JS, DELTA_P, DELTA_Q, entropy=2.0, delta_form="sum")
    assert bound.entropy_form == "estimated" and bound.entropy == 2.0 and bound.delta_form == "sum"
    assert bound.input_term == pytest.approx(1.46969385, abs=1e-8)
    assert bound.output_term == pytest.approx(2.51063119, abs=1e-8)
    assert bound.value == pytest.approx(3.98032504, abs=1e-8)
    assert bound.output_terms == pytest.approx({"sum": 2.51063119, "max": 2.4, "code": 2.0}, abs=1e-8)
    # the same numbers through a ShiftSeverity (what the analysis calls)
    severity = ShiftSeverity(*JS.values(), DELTA_P, DELTA_Q, 6, 3, "equal")
    assert bound_of(severity, 2.0, "sum") == bound


def test_emid_code_bound_by_hand():
    # Σ sqrt(JS) + δ_P^¼ + δ_Q^¼ = 0.9 + 0.2 + 0.3 = 1.4: unit coefficients, no Ĥ, no sqrt(2/3)
    assert emid_code_bound(JS, DELTA_P, DELTA_Q) == pytest.approx(1.4, abs=1e-12)
    assert code_bound_of(ShiftSeverity(*JS.values(), DELTA_P, DELTA_Q, 6, 3, "equal")) == pytest.approx(1.4, abs=1e-12)
    # the theorem's scale-adjusted sum form (Ĥ = 1) on the same terms is larger:
    # sqrt(2/3) · 0.9 + 2.51063119 = 0.73484692 + 2.51063119 = 3.24547812
    assert remid_bound(JS, DELTA_P, DELTA_Q, None, "sum").value == pytest.approx(3.24547812, abs=1e-8)


def test_scale_adjusted_and_estimated_forms():
    bound = remid_bound(JS, DELTA_P, DELTA_Q, entropy=None, delta_form="max")
    assert bound.entropy_form == "scale_adjusted" and bound.entropy == 1.0
    assert bound.input_term == pytest.approx(math.sqrt(2 / 3) * 0.9)
    assert bound.output_term == pytest.approx(8 * 0.3)
    assert bound.value == pytest.approx(math.sqrt(2 / 3) * 0.9 + 2.4)
    estimated = remid_bound(JS, DELTA_P, DELTA_Q, entropy=2.5, delta_form="code")
    assert estimated.entropy_form == "estimated"
    assert estimated.value == pytest.approx(math.sqrt(2 / 3) * 2.5 * 0.9 + 4 * (0.2 + 0.3))


def test_output_term_forms_and_their_order():
    terms = output_terms(DELTA_P, DELTA_Q)
    assert terms["max"] == pytest.approx(2.4)
    assert terms["code"] == pytest.approx(2.0)
    assert terms["sum"] == pytest.approx(8 * 0.0097**0.25)
    assert terms["code"] <= terms["max"] <= terms["sum"]


def test_rounding_negatives_are_zero_and_real_negatives_are_errors():
    assert remid_bound({**JS, "user": -1e-14}, 0.0, 0.0, None, "sum").input_term == pytest.approx(
        math.sqrt(2 / 3) * 0.7
    )
    with pytest.raises(ValueError, match=r"JS\[character\] = -0.01"):
        remid_bound({**JS, "character": -0.01}, 0.0, 0.0, None, "sum")
    with pytest.raises(ValueError, match="delta_q"):
        remid_bound(JS, 0.0, -0.01, None, "sum")
    with pytest.raises(ValueError, match="exactly"):
        remid_bound({"user": 0.1}, 0.0, 0.0, None, "sum")
    with pytest.raises(ValueError, match="delta_form"):
        remid_bound(JS, 0.0, 0.0, None, "mean")


def test_entropy_bound_is_the_max_of_the_per_prompt_sums():
    model = torch.tensor([1.0, 2.0, 0.5])
    golden = torch.tensor([1.5, 0.2, 3.0])
    assert entropy_bound(model, golden) == pytest.approx(3.5)
    with pytest.raises(ValueError, match="equally long"):
        entropy_bound(model, golden[:2])


def test_estimated_form_by_hand_for_a_given_entropy():
    # Ĥ = 0.8 (e.g. 2 x 0.4 nats per token): input term sqrt(2/3) * 0.8 * 0.9, output term unchanged
    scale_adjusted = remid_bound(JS, DELTA_P, DELTA_Q, None, "max")
    estimated = remid_bound(JS, DELTA_P, DELTA_Q, 0.8, "max")
    assert estimated.entropy == 0.8 and estimated.entropy_form == "estimated"
    assert estimated.input_term == pytest.approx(0.8 * scale_adjusted.input_term)
    assert estimated.value == pytest.approx(math.sqrt(2 / 3) * 0.72 + 2.4)
    assert estimated.output_term == scale_adjusted.output_term
    assert remid_bound(JS, DELTA_P, DELTA_Q, 0.0, "max").value == pytest.approx(2.4)
    with pytest.raises(ValueError, match="finite non-negative"):
        remid_bound(JS, DELTA_P, DELTA_Q, float("nan"), "sum")


def test_the_configured_default_is_the_theorem_sum_form():
    from omegaconf import OmegaConf

    from rpbench.core.paths import CONF_DIR

    assert OmegaConf.load(CONF_DIR / "evaluator" / "rpgbench.yaml").generalization.delta_form == "sum"
