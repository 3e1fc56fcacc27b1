import math

import pytest
from scipy.stats import binomtest

from dgrpo.metrics.intervals import wilson, with_interval


def test_hand_computed_value():
    # s = 8, n = 20, z = 1.96: p = 0.4, z² = 3.8416,
    # centre = (0.4 + 0.09604) / 1.19208 = 0.416113, half = 1.96·sqrt(0.012 + 0.002401) / 1.19208 = 0.197310
    low, high = wilson(8, 20, z=1.96)
    assert low == pytest.approx(0.218803, abs=1e-5) and high == pytest.approx(0.613423, abs=1e-5)


@pytest.mark.parametrize("s,n", [(0, 1), (0, 16), (3, 16), (16, 16), (40, 128), (127, 128), (500, 1000)])
def test_agrees_with_scipy(s, n):
    ref = binomtest(s, n).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = wilson(s, n)
    assert math.isclose(low, ref.low, abs_tol=1e-9) and math.isclose(high, ref.high, abs_tol=1e-9)


def test_zero_successes_still_bound_the_rate():
    # 0 false positives in 1,000 honest completions: the rate is below ~0.38% at 95%, not "0".
    low, high = wilson(0, 1000)
    assert low == 0.0 and high == pytest.approx(0.003827, abs=1e-5)


def test_bad_counts():
    with pytest.raises(ValueError, match="n > 0"):
        wilson(0, 0)
    with pytest.raises(ValueError, match="lie in"):
        wilson(5, 4)


def test_with_interval_reads_a_rate():
    rec = with_interval({"eval/accuracy": 0.25}, "eval/accuracy", 128)  # 32 of 128
    assert (rec["eval/accuracy_ci95_low"], rec["eval/accuracy_ci95_high"]) == wilson(32, 128)
    assert with_interval({"eval/accuracy": None}, "eval/accuracy", 128) == {"eval/accuracy": None}
