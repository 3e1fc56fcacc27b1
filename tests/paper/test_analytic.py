"""Scaled poisoned advantage Â·c/G (paper §B.2, §B.3): golden values by hand, closed form, peaks."""

import json
import math
import random
import statistics

import numpy as np
import pytest

from dgrpo.paper.analytic import fig8, fig8_closed_form, fig8_data, fig10, fig10_data, scaled_poison_advantage


@pytest.mark.parametrize(
    "honest, c, ddof, expected",
    [
        # G=4, c=1, honest 0: μ=1/4, σ=√(3/16); Â=(3/4)/(√3/4)=√3; ×1/4 → √3/4
        ([0, 0, 0], 1, 0, math.sqrt(3) / 4),
        # G=4, c=2: μ=1/2, σ=1/2, Â=1, ×2/4 → 1/2
        ([0, 0], 2, 0, 0.5),
        # G=4, c=1, unbiased std: σ²=(3·(1/4)²+(3/4)²)/3=1/4, Â=(3/4)/(1/2)=3/2, ×1/4 → 3/8
        ([0, 0, 0], 1, 1, 0.375),
        # G=3, c=1, honest [0.2, 0.4]: μ=1.6/3, Σ(r−μ)²=(1.4²+1²+0.4²)/9=3.12/9, σ=√(3.12/27);
        # Â=(1.4/3)/σ, ×1/3 → (1.4/9)·√(27/3.12) = 0.457604…
        ([0.2, 0.4], 1, 0, 1.4 / 9 * math.sqrt(27 / 3.12)),
        # all rewards 1: σ=0 → no signal, 0 (not NaN)
        ([1.0, 1.0], 2, 0, 0.0),
    ],
)
def test_golden_values(honest, c, ddof, expected):
    assert float(scaled_poison_advantage(np.array(honest), c, ddof=ddof)) == pytest.approx(expected, rel=1e-12)


def test_batched_groups_match_one_by_one():
    honest = np.array([[0.0, 0.0, 0.0], [0.2, 0.4, 0.9]])
    together = scaled_poison_advantage(honest, 2)
    apart = [float(scaled_poison_advantage(h, 2)) for h in honest]
    assert together.tolist() == pytest.approx(apart)


@pytest.mark.parametrize("ddof", [0, 1])
def test_fig8_direct_equals_closed_form(ddof):
    data = fig8_data(ddof=ddof)
    for g, cur in data["curves"].items():
        assert cur["c"] == list(range(1, g))
        assert cur["scaled_advantage"] == pytest.approx(cur["closed_form"], rel=1e-12)
        # independent check of the closed form: √(p(1−p))·√((G−1)/G)^ddof
        p = np.array(cur["ratio"])
        assert cur["closed_form"] == pytest.approx(np.sqrt(p * (1 - p) * ((g - 1) / g) ** ddof).tolist())


def test_fig8_peaks_at_half_and_is_strong_at_one_fifth():
    data = fig8_data()
    assert data["peak_ratio"] == {12: 0.5, 16: 0.5, 24: 0.5, 32: 0.5}
    assert max(data["curves"][12]["scaled_advantage"]) == pytest.approx(0.5)
    assert float(fig8_closed_form(0.2)) == pytest.approx(0.4)  # 80% of the peak at c/G = 1/5 (§B.2)


def test_fig10_without_noise_is_fig8():
    """σ_h = 0 and μ_h = 0 make every honest reward 0: Fig. 10's G=12 curve must equal Fig. 8's."""
    data = fig10_data(means=(0.0,), std=0.0, n_draws=3)
    assert data["curves"]["0"]["scaled_advantage"] == pytest.approx(fig8_data((12,))["curves"][12]["closed_form"])


def test_fig10_clipping_to_zero_is_fig8():
    data = fig10_data(means=(-10.0,), n_draws=50, clip=True)
    assert data["curves"]["-10"]["scaled_advantage"] == pytest.approx(fig8_data((12,))["curves"][12]["closed_form"])


def test_fig10_monte_carlo_matches_plain_python():
    """Re-derive the mean over draws with the standard library from the same normal draws."""
    n, seed, mu, std, g = 7, 3, 0.4, 0.25, 12
    data = fig10_data(means=(mu,), n_draws=n, seed=seed)
    z = np.random.default_rng(seed).standard_normal((n, g)).tolist()
    for c in (1, 6, 11):
        vals = []
        for row in z:
            rewards = [1.0] * c + [mu + std * x for x in row[: g - c]]
            vals.append((1.0 - statistics.fmean(rewards)) / statistics.pstdev(rewards) * c / g)
        assert data["curves"]["0.4"]["scaled_advantage"][c - 1] == pytest.approx(statistics.fmean(vals), rel=1e-9)


def test_fig10_peak_near_half_and_effect_shrinks_with_honest_reward():
    data = fig10_data(n_draws=4000)
    for mu, peak in data["peak_ratio"].items():
        assert 5 / 12 <= peak <= 7 / 12, (mu, peak)  # §B.3: peaks near 1/2
    at_low_ratio = [data["curves"][k]["scaled_advantage"][1] for k in ("0", "0.2", "0.4", "0.6")]  # c/G = 2/12
    assert at_low_ratio == sorted(at_low_ratio, reverse=True)  # higher μ_h → weaker poison (§B.3)
    assert data["settings"]["std_or_variance"] == "std" and data["settings"]["clip"] is False


def test_outputs_written(tmp_path):
    d8 = fig8(tmp_path)
    d10 = fig10(tmp_path, n_draws=200)
    assert json.loads((tmp_path / "fig8.json").read_text())["peak_ratio"] == {str(k): v for k, v in d8["peak_ratio"].items()}
    rows = (tmp_path / "fig10.csv").read_text().splitlines()
    assert rows[0].startswith("μ_h,c,ratio,scaled_advantage") and len(rows) == 1 + 4 * 11
    first = rows[1].split(",")
    assert float(first[3]) == pytest.approx(d10["curves"]["0"]["scaled_advantage"][0])
    for name in ("fig8.png", "fig10.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_seed_changes_draws_but_not_shape():
    a = fig10_data(means=(0.2,), n_draws=100, seed=0)["curves"]["0.2"]["scaled_advantage"]
    b = fig10_data(means=(0.2,), n_draws=100, seed=1)["curves"]["0.2"]["scaled_advantage"]
    assert len(a) == len(b) == 11 and a != b
    random.seed(0)  # the module uses its own generator: global state is irrelevant
    assert fig10_data(means=(0.2,), n_draws=100, seed=0)["curves"]["0.2"]["scaled_advantage"] == a
