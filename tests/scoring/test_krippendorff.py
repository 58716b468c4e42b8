"""Krippendorff's alpha against hand-computed values, Krippendorff's (2011) worked example with missing data,
and the `krippendorff` package as a peer on random data (skipped where it is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

from rpbench.scoring.krippendorff import alpha

# Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers x 12 units, "." missing
WORKED = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def test_a_small_example_matches_the_hand_computation():
    # units (1,1), (2,2), (3,4): coincidences o_11 = o_22 = 2, o_34 = o_43 = 1; n_1 = n_2 = 2, n_3 = n_4 = 1, n = 6.
    # interval: sum o delta = 2; sum_ck n_c n_k (c-k)^2 = 2 * (4 + 8 + 18 + 2 + 8 + 1) = 82 -> 1 - 5 * 2 / 82 = 36/41
    # nominal: sum n_c n_k over c != k = 36 - 10 = 26 -> 1 - 5 * 2 / 26 = 8/13
    # ordinal: delta_34 = (n_3 + n_4 - 1)^2 = 1; delta_12 = (2+2-2)^2 = 4, delta_13 = (2+2+1-1.5)^2 = 12.25,
    # delta_14 = (6 - 1.5)^2 = 20.25, delta_23 = (3 - 1.5)^2 = 2.25, delta_24 = (4 - 1.5)^2 = 6.25;
    # sum n_c n_k delta = 2 * (4*4 + 2*12.25 + 2*20.25 + 2*2.25 + 2*6.25 + 1) = 2 * 99 = 198 -> 1 - 10 / 198
    ratings = [[1, 2, 3], [1, 2, 4]]
    assert alpha(ratings, "interval") == pytest.approx(36 / 41)
    assert alpha(ratings, "nominal") == pytest.approx(8 / 13)
    assert alpha(ratings, "ordinal") == pytest.approx(1 - 10 / 198)


def test_krippendorffs_worked_example_with_missing_values():
    """The paper's values: nominal 0.743, ordinal 0.815, interval 0.849 (unit 12, one value, is not pairable)."""
    assert alpha(WORKED, "nominal") == pytest.approx(0.743, abs=5e-4)
    assert alpha(WORKED, "ordinal") == pytest.approx(0.815, abs=5e-4)
    assert alpha(WORKED, "interval") == pytest.approx(0.849, abs=5e-4)


def test_alpha_is_undefined_without_pairable_or_varied_values():
    assert alpha([[1, None], [None, 2]]) is None  # no unit with two values
    assert alpha([[3, 3], [3, 3]]) is None  # no expected disagreement
    assert alpha([[1, 5], [5, 1]], "interval") < 0  # systematic disagreement
    with pytest.raises(ValueError, match="level"):
        alpha([[1, 2], [1, 2]], "ratio")
    with pytest.raises(ValueError, match="one entry per unit"):
        alpha([[1, 2], [1]])


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_agrees_with_the_krippendorff_package_on_random_data_with_missing_values(level):
    peer = pytest.importorskip("krippendorff", reason="the krippendorff package (a test-only peer) is not installed")
    rng = np.random.default_rng(7)
    for _ in range(5):
        truth = rng.integers(1, 6, size=30)
        data = np.clip(truth + rng.integers(-1, 2, size=(4, 30)), 1, 5).astype(float)
        data[rng.random(data.shape) < 0.25] = np.nan
        ours = alpha([[None if np.isnan(v) else float(v) for v in row] for row in data], level)
        assert ours == pytest.approx(peer.alpha(reliability_data=data, level_of_measurement=level), abs=1e-9)
