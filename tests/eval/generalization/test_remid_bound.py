"""Theorem 3.4's bound and the EMID code's bound, by hand."""

import math

import pytest
import torch

from rpbench.eval.generalization.bound import emid_code_bound, entropy_bound, output_terms, remid_bound

JS = {"user": 0.04, "character": 0.09, "dialogue": 0.16}  # roots 0.2, 0.3, 0.4: sum 0.9


def test_scale_adjusted_and_estimated_forms():
    bound = remid_bound(JS, delta_p=0.0016, delta_q=0.0081)  # fourth roots 0.2, 0.3
    assert bound.entropy_form == "scale_adjusted" and bound.entropy == 1.0
    assert bound.input_term == pytest.approx(math.sqrt(2 / 3) * 0.9)
    assert bound.output_term == pytest.approx(8 * 0.3)
    assert bound.value == pytest.approx(math.sqrt(2 / 3) * 0.9 + 2.4)
    estimated = remid_bound(JS, 0.0016, 0.0081, entropy=2.5, delta_form="code")
    assert estimated.entropy_form == "estimated"
    assert estimated.value == pytest.approx(math.sqrt(2 / 3) * 2.5 * 0.9 + 4 * (0.2 + 0.3))


def test_output_term_forms_and_their_order():
    terms = output_terms(0.0016, 0.0081)
    assert terms["max"] == pytest.approx(2.4)
    assert terms["code"] == pytest.approx(2.0)
    assert terms["sum"] == pytest.approx(8 * 0.0097**0.25)
    assert terms["code"] <= terms["max"] <= terms["sum"]


def test_emid_code_bound_has_unit_coefficients():
    assert emid_code_bound(JS, 0.0016, 0.0081) == pytest.approx(0.9 + 0.2 + 0.3)


def test_rounding_negatives_are_zero_and_real_negatives_are_errors():
    assert remid_bound({**JS, "user": -1e-14}, 0.0, 0.0).input_term == pytest.approx(math.sqrt(2 / 3) * 0.7)
    with pytest.raises(ValueError, match=r"JS\[character\] = -0.01"):
        remid_bound({**JS, "character": -0.01}, 0.0, 0.0)
    with pytest.raises(ValueError, match="exactly"):
        remid_bound({"user": 0.1}, 0.0, 0.0)
    with pytest.raises(ValueError, match="delta_form"):
        remid_bound(JS, 0.0, 0.0, delta_form="mean")


def test_entropy_bound_is_the_max_of_the_per_prompt_sums():
    model = torch.tensor([1.0, 2.0, 0.5])
    golden = torch.tensor([1.5, 0.2, 3.0])
    assert entropy_bound(model, golden) == pytest.approx(3.5)
    with pytest.raises(ValueError, match="equally long"):
        entropy_bound(model, golden[:2])


def test_estimated_form_by_hand_for_a_given_entropy():
    # Ĥ = 0.8 (e.g. 2 x 0.4 nats per token): input term sqrt(2/3) * 0.8 * 0.9, output term unchanged
    scale_adjusted = remid_bound(JS, 0.0016, 0.0081)
    estimated = remid_bound(JS, 0.0016, 0.0081, entropy=0.8)
    assert estimated.entropy == 0.8 and estimated.entropy_form == "estimated"
    assert estimated.input_term == pytest.approx(0.8 * scale_adjusted.input_term)
    assert estimated.value == pytest.approx(math.sqrt(2 / 3) * 0.72 + 2.4)
    assert estimated.output_term == scale_adjusted.output_term
    assert remid_bound(JS, 0.0016, 0.0081, entropy=0.0).value == pytest.approx(2.4)
    with pytest.raises(ValueError, match="finite non-negative"):
        remid_bound(JS, 0.0016, 0.0081, entropy=float("nan"))
