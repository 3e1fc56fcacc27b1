import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import trim_mean

from dgrpo.robust.aggregators import (
    AGGREGATORS,
    aggregate,
    centered_clipping,
    geometric_median,
    krum,
    krum_scores,
    median,
    multi_krum,
    trimmed_mean,
)

KW = {"centered_clipping": {"tau": 1.0}}


def _rand(n, d, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("n", [7, 8])
def test_average_and_median_match_numpy(n):
    x = _rand(n, 13)
    assert torch.allclose(aggregate("average", x), torch.from_numpy(x.numpy().mean(axis=0)))
    # numpy averages the two middle values for an even n; torch.median would not
    assert torch.allclose(median(x), torch.from_numpy(np.median(x.numpy(), axis=0)))


@pytest.mark.parametrize("n,f", [(10, 2), (8, 1), (9, 0)])
def test_trimmed_mean_matches_scipy(n, f):
    x = _rand(n, 11, seed=n)
    ref = trim_mean(x.numpy(), f / n, axis=0)  # scipy cuts int(f/n · n) = f from each side
    assert torch.allclose(trimmed_mean(x, f), torch.from_numpy(ref))


def test_trimmed_mean_needs_n_above_2f():
    with pytest.raises(ValueError, match="n > 2f"):
        trimmed_mean(_rand(4, 3), 2)


def _sum_of_unit_vectors(x, z):
    diff = z - x
    return (diff / diff.norm(dim=1, keepdim=True)).sum(dim=0)


def test_geometric_median_optimality_and_scipy():
    x = _rand(9, 5, seed=3)
    z = geometric_median(x, tol=1e-12, max_iter=10_000)
    # first-order condition: Σ (z − x_i)/||z − x_i|| = 0 (z is at no data point here)
    assert _sum_of_unit_vectors(x, z).norm() < 1e-6
    obj = lambda v: float(np.linalg.norm(x.numpy() - v, axis=1).sum())  # noqa: E731
    ref = minimize(obj, x.numpy().mean(axis=0), method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20_000})
    assert obj(z.numpy()) <= ref.fun + 1e-8
    assert np.allclose(z.numpy(), ref.x, atol=1e-3)


def test_geometric_median_in_one_dimension_is_the_median():
    x = torch.tensor([[0.0], [1.0], [2.0], [50.0], [1000.0]], dtype=torch.float64)
    assert geometric_median(x, tol=1e-12, max_iter=10_000).item() == pytest.approx(2.0, abs=1e-6)


def test_geometric_median_resists_minority_outliers():
    x = _rand(10, 4, seed=5)
    x[7:] = 1e6  # 3 of 10 far away
    z = geometric_median(x)
    assert (z - x[:7].mean(dim=0)).norm() < 5.0  # stays with the cluster, the mean would be at 3e5


def test_geometric_median_on_a_data_point_stays_finite():
    x = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    z = geometric_median(x)
    assert torch.isfinite(z).all() and z.norm() < 1e-6  # 3 of 4 points sit on the optimum


# Hand-computed Krum example: 1-D points, n = 6, f = 1, so each score sums the n − f − 2 = 3
# smallest squared distances to the other points.
#   x=0: 1+4+9 = 14   x=1: 1+1+4 = 6   x=2: 1+1+4 = 6   x=3: 1+4+9 = 14
#   x=10: 49+64+81 = 194   x=100: 8100+9409+9604 = 27113
KRUM_X = torch.tensor([[0.0], [1.0], [2.0], [3.0], [10.0], [100.0]], dtype=torch.float64)


def test_krum_scores_by_hand():
    assert krum_scores(KRUM_X, 1).tolist() == [14.0, 6.0, 6.0, 14.0, 194.0, 27113.0]


def test_krum_and_multi_krum_by_hand():
    assert krum(KRUM_X, 1).item() == 1.0  # tie 1 vs 2 goes to the lower index
    assert multi_krum(KRUM_X, 1).item() == pytest.approx((0 + 1 + 2 + 3 + 10) / 5)  # m = n − f = 5
    assert multi_krum(KRUM_X, 1, m=2).item() == pytest.approx(1.5)
    assert multi_krum(KRUM_X, 1, m=3).item() == pytest.approx(1.0)  # tie 0 vs 3 → index 0


def test_krum_scores_match_brute_force_loops():
    x, f = _rand(8, 3, seed=7), 2
    n = len(x)
    brute = []
    for i in range(n):
        d2 = sorted(float(((x[i] - x[j]) ** 2).sum()) for j in range(n) if j != i)
        brute.append(sum(d2[: n - f - 2]))
    assert krum_scores(x, f).tolist() == pytest.approx(brute)


def test_krum_needs_n_above_2f_plus_2():
    with pytest.raises(ValueError, match="n > 2f \\+ 2"):
        aggregate("krum", _rand(6, 2), 2)
    with pytest.raises(ValueError, match="m"):
        multi_krum(_rand(7, 2), 1, m=0)


def test_centered_clipping_by_hand():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    # L=1 from 0: [3,4] (norm 5) clipped to [0.6, 0.8], [0,0] kept → mean [0.3, 0.4]
    assert centered_clipping(x, tau=1.0).tolist() == pytest.approx([0.3, 0.4])
    # L=2: from [0.3,0.4], [2.7,3.6] (norm 4.5) → [0.6,0.8]; [-0.3,-0.4] (norm 0.5) kept → +[0.15,0.2]
    assert centered_clipping(x, tau=1.0, iterations=2).tolist() == pytest.approx([0.45, 0.6])
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    # from [3,4]: [0,0] is at distance 5 → moves by [-0.6,-0.8]/2; [3,4] is at distance 0
    assert centered_clipping(x, tau=1.0, reference=ref).tolist() == pytest.approx([2.7, 3.6])


def test_centered_clipping_is_the_mean_for_a_large_radius_and_bounds_outliers():
    x = _rand(5, 4)
    assert torch.allclose(centered_clipping(x, tau=1e9), x.mean(dim=0))
    y = torch.cat([x, torch.full((1, 4), 1e9, dtype=torch.float64)])
    base = centered_clipping(x, tau=1.0) * 5 / 6  # the honest part of the mean over 6 nodes
    assert (centered_clipping(y, tau=1.0) - base).norm() <= 1.0 / 6 + 1e-9  # outlier moves it ≤ τ/n
    with pytest.raises(ValueError, match="tau"):
        aggregate("centered_clipping", x, 1)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_every_rule_shape_dtype_and_permutation_invariance(name):
    x = _rand(9, 6, seed=11).float()
    out = aggregate(name, x, 2, **KW.get(name, {}))
    assert out.shape == (6,) and out.dtype == torch.float32
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(aggregate(name, x[perm], 2, **KW.get(name, {})), out, atol=1e-5)


def test_aggregate_errors():
    x = _rand(5, 3)
    with pytest.raises(ValueError, match="unknown aggregator"):
        aggregate("mode", x, 1)
    with pytest.raises(ValueError, match="f < n"):
        aggregate("median", x, 5)
    with pytest.raises(ValueError, match="non-negative"):
        aggregate("median", x, -1)
    with pytest.raises(ValueError, match="2-D"):
        aggregate("median", x[0], 0)
    with pytest.raises(ValueError, match="floating"):
        aggregate("median", x.long(), 0)
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"nodes \[3\]"):
        aggregate("median", bad, 1)
