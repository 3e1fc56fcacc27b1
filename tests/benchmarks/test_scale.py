"""The scale benchmark's swarm (benchmarks/scale.py) on 4 nodes: its accounting and its closed form."""

import importlib.util
import sys
from argparse import Namespace
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("scale_bench", _ROOT / "benchmarks" / "scale.py")
scale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scale)


def _args(**kw):
    base = dict(malicious=0.25, poison=1.0, group=4, max_new_tokens=8, fraction=0.5, budget=6, ban_after=1, rounds=6,
                measure=1, timed_rounds=1, seed=1)
    return Namespace(**{**base, **kw})


def test_a_four_node_swarm_bans_its_cheater_and_nobody_honest():
    sys.path.insert(0, str(_ROOT))
    result = scale.run(4, _args())
    assert (result["cheaters"], result["honest"]) == (1, 3) and result["honest_rejected"] == 0
    s = result["summary"]
    assert s["full"]["round0_checked_per_node"] == 3 * 4  # every message of the 3 peers
    assert s["full"]["rounds_until_all_banned"] == 1  # every message poisoned and checked: banned in round 1
    bytes0 = {mode: s[mode]["round0_bytes_per_node"] for mode in scale.MODES}
    assert len(set(bytes0.values())) == 1 and bytes0["full"] > 3 * 4 * 64  # the same traffic; ≥ 64 B a signature
    assert s["budget_shared"]["spot_fraction"] == pytest.approx(6 / 12)
    assert all(s[mode]["honest_banned_pairs"] == 0 for mode in scale.MODES)
    assert all(s[mode]["signature_ms_per_node"] > 0 for mode in scale.MODES)


def test_closed_form_of_the_rounds_until_all_banned():
    args = _args(poison=1.0, fraction=1.0)
    assert scale.expected_rounds_all_banned(4, 1, "full", args) == pytest.approx(1.0)
    # one cheater, one honest receiver, local bans: catch probability per round 1 − (1 − p f)^G, geometric
    args = _args(poison=0.5, fraction=0.2, group=4)
    q = 1 - (1 - 0.1) ** 4
    assert scale.expected_rounds_all_banned(2, 1, "spot", args) == pytest.approx(1 / q, rel=1e-6)
    # two receivers checking everything see the same poisoned messages: banned together, once one is sent
    # (probability 1/2 a round with G = 1), not each on its own: E = 2 rounds, not E[max of two geometrics] = 8/3
    args = _args(poison=0.5, fraction=1.0, group=1)
    assert scale.expected_rounds_all_banned(3, 1, "full", args) == pytest.approx(2.0, rel=1e-6)
