import math

import pytest
import torch
from scipy.stats import norm

from dgrpo.robust.aggregators import AGGREGATORS, aggregate
from dgrpo.robust.update_attacks import (
    a_little_is_enough,
    alie_z,
    deviation_angle,
    normalized_attack,
    normalized_attack_search,
    poison,
    sign_flipping,
)


def _honest(n_h=15, d=200, snr=0.2, seed=0):
    """Noise-dominated honest updates: every coordinate has mean snr and unit std (like SGD gradients)."""
    gen = torch.Generator().manual_seed(seed)
    return snr + torch.randn(n_h, d, generator=gen, dtype=torch.float64)


def _cos(a, b):
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def test_sign_flipping_sends_minus_the_mean():
    h = _honest(4, 6)
    p = sign_flipping(h, 3)
    assert p.shape == (3, 6)
    assert torch.allclose(p, (-h.mean(dim=0)).expand(3, -1))
    assert torch.allclose(sign_flipping(h, 1, scale=2.0)[0], -2 * h.mean(dim=0))


@pytest.mark.parametrize("n,f", [(20, 5), (50, 12), (4, 1), (10, 4), (100, 20)])
def test_alie_z_matches_the_papers_formula(n, f):
    s = math.floor(n / 2 + 1) - f
    assert alie_z(n, f) == pytest.approx(norm.ppf((n - s) / n), abs=1e-12)


def test_alie_z_golden_values_and_limits():
    assert alie_z(20, 5) == pytest.approx(0.5244, abs=1e-4)  # s = 6, Φ⁻¹(0.7)
    assert alie_z(4, 1) == 0.0  # s = 2, Φ⁻¹(0.5)
    with pytest.raises(ValueError, match="s > 0"):
        alie_z(10, 6)  # s = ⌊6⌋ − 6 = 0
    with pytest.raises(ValueError):
        alie_z(3, 3)


def test_alie_is_mean_minus_z_std():
    h = _honest(15, 30, seed=4)
    z = alie_z(20, 5)
    ref = h.numpy().mean(axis=0) - z * h.numpy().std(axis=0, ddof=1)
    p = a_little_is_enough(h, 5)
    assert p.shape == (5, 30)
    assert torch.allclose(p, torch.from_numpy(ref).expand(5, -1))
    assert torch.allclose(a_little_is_enough(h, 5, z=1.5)[0], h.mean(dim=0) - 1.5 * h.std(dim=0))
    with pytest.raises(ValueError, match="at least 2"):
        a_little_is_enough(h[:1], 1)


def test_deviation_angle_by_hand():
    h = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    # mean of [1,0],[1,0],[-1,3] = [1/3, 1] → angle to [1,0] is atan(3)
    assert deviation_angle("average", h, torch.tensor([[-1.0, 3.0]]), 1) == pytest.approx(math.degrees(math.atan(3.0)))
    # mean of [1,0],[1,0],[-2,0] = 0 → counted as 90°
    assert deviation_angle("average", h, torch.tensor([[-2.0, 0.0]]), 1) == 90.0


def test_normalized_attack_is_normalized_and_takes_the_worst_candidate():
    h = _honest()
    choice = normalized_attack_search(h, 5, "median")
    nu = h.norm(dim=1).median()
    scale = float(choice.candidate.split("@")[1])
    assert choice.poisoned.shape == (5, 200)
    assert torch.allclose(choice.poisoned.norm(dim=1), torch.full((5,), float(scale * nu), dtype=torch.float64))
    assert torch.equal(choice.poisoned, choice.poisoned[:1].expand(5, -1))  # colluding: identical rows
    assert choice.angle == max(choice.angles.values())
    assert len(choice.angles) == (2 + 8) * 3  # 2 fixed + 8 orthogonal directions × 3 scales
    assert choice.angle == pytest.approx(deviation_angle("median", h, choice.poisoned, 5))
    assert torch.equal(normalized_attack(h, 5, aggregator="median"), choice.poisoned)


# Cosine between the aggregate and the honest mean with 15 honest + 5 attacker nodes (25%),
# d = 200, every honest coordinate ~ N(0.2, 1), seed 0 (deterministic). Measured ("clean" =
# the rule on the 15 honest updates alone, with f = 5 for trimmed mean and the Krums):
#                     clean  normalized  (sign flip, ALIE)
#   average           +1.00    -1.00      (+1.00, +0.91)
#   median            +0.86    -0.10      (+0.07, +0.20)
#   trimmed_mean      +0.92    -0.27      (+0.58, +0.61)
#   geometric_median  +1.00    -0.99      (-0.99, +0.35)
#   krum              +0.35    -1.00      (-1.00, -0.04)
#   multi_krum        +0.86    -0.73      (+0.64, +0.75)
#   centered_clipping +1.00    -0.98      (+1.00, +0.91)   τ = median honest norm
# The bound stated per rule leaves a margin for float differences across platforms.
BOUND = {
    "average": -0.9,
    "median": 0.0,
    "trimmed_mean": -0.15,
    "geometric_median": -0.9,
    "krum": -0.9,
    "multi_krum": -0.6,
    "centered_clipping": -0.9,
}


@pytest.fixture(scope="module")
def honest():
    return _honest()


def _kw(name, h):
    return {"tau": float(h.norm(dim=1).median())} if name == "centered_clipping" else {}


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_normalized_attack_reverses_every_rule_at_25_percent(name, honest):
    f, mu = 5, honest.mean(dim=0)
    kw = _kw(name, honest)
    poisoned = normalized_attack(honest, f, aggregator=name, agg_kwargs=kw)
    attacked = _cos(aggregate(name, torch.cat([honest, poisoned]), f, **kw), mu)
    assert attacked < BOUND[name], f"{name}: cos {attacked:+.3f}"


@pytest.mark.parametrize("name", ["median", "trimmed_mean"])
def test_normalized_beats_sign_flipping_and_alie_on_coordinatewise_rules(name, honest):
    f, mu = 5, honest.mean(dim=0)
    clean = _cos(aggregate(name, honest, 0 if name == "median" else f), mu)
    assert clean > 0.85  # without attackers the rule follows the honest mean
    cos = {}
    for attack in ("normalized", "sign_flipping", "alie"):
        kw = {"aggregator": name} if attack == "normalized" else {}
        cos[attack] = _cos(aggregate(name, torch.cat([honest, poison(attack, honest, f, **kw)]), f), mu)
    assert cos["normalized"] < 0.0
    assert cos["normalized"] < cos["sign_flipping"] - 0.15
    assert cos["normalized"] < cos["alie"] - 0.25


def test_attack_errors(honest):
    with pytest.raises(ValueError, match="f"):
        sign_flipping(honest, 0)
    with pytest.raises(ValueError, match="zero"):
        normalized_attack_search(torch.zeros(4, 3, dtype=torch.float64), 1, "median")
    with pytest.raises(ValueError, match="scales"):
        normalized_attack_search(honest, 1, "median", scales=(0.0,))
    with pytest.raises(ValueError, match="unknown update attack"):
        poison("gauss", honest, 1)
    with pytest.raises(ValueError, match="n > 2f \\+ 2"):
        normalized_attack_search(honest[:4], 3, "krum")  # 7 nodes cannot tolerate 3 under Krum
