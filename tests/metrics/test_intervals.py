import math

import pytest

from dgrpo.metrics.intervals import wilson


def test_wilson_half_matches_hand_computation():
    # p = 0.5, n = 10, z = 1.96: centre 0.5, half = 1.96/1.38415 * sqrt(0.025 + 0.0096040) = 0.26340
    low, high = wilson(5, 10)
    assert low == pytest.approx(0.23659, abs=1e-4) and high == pytest.approx(0.76341, abs=1e-4)


def test_wilson_zero_of_1000_is_not_empty():
    low, high = wilson(0, 1000)
    z2 = 1.959963984540054 ** 2
    assert low == 0.0 and high == pytest.approx(z2 / (1000 + z2), rel=1e-9)  # closed form at p̂ = 0
    assert high == pytest.approx(0.00383, abs=1e-5)


def test_wilson_all_successes_mirror_none():
    low, high = wilson(200, 200)
    lo0, hi0 = wilson(0, 200)
    assert high == 1.0 and low == pytest.approx(1 - hi0) and math.isclose(lo0, 0.0)


@pytest.mark.parametrize("s,n", [(-1, 5), (6, 5), (0, -1)])
def test_wilson_rejects_impossible_counts(s, n):
    with pytest.raises(ValueError, match="successes"):
        wilson(s, n)
