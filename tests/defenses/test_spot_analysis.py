"""The spot-check model (dgrpo.defenses.spot_analysis): closed forms against hand-computed cases and against
a simulation with the real checker and ban list."""

import dataclasses
import math

import pytest

from dgrpo.defenses.spot_analysis import (DEFAULT, Setting, best_hit_and_run, break_even_benefit, caught_per_round,
                                        deterring_fraction, expected_ban_round, expected_gain, hit_and_run_gain,
                                        poisons_per_identity, simulate, strike_probability)


def test_closed_forms_on_hand_computed_cases():
    s = Setting(fraction=0.1, messages=8, ban_after=1, horizon=12, benefit=1.0)
    assert caught_per_round(1.0, s) == pytest.approx(1 - 0.9 ** 8)
    assert expected_ban_round(1.0, s) == pytest.approx(1 / (1 - 0.9 ** 8))  # geometric in rounds
    full = dataclasses.replace(s, fraction=1.0)
    assert expected_gain(1.0, full) == pytest.approx(-8 * 12)  # every message caught, banned after round 1
    assert expected_gain(0.0, s) == 0 and expected_ban_round(0.0, s) == math.inf
    # a 1-token edit at position_fraction 0.25 is caught in a quarter of checks; 2 receivers sharing catches
    q = dataclasses.replace(s, position_fraction=0.25, receivers=2)
    assert strike_probability(0.5, q) == pytest.approx(0.5 * (1 - (1 - 0.1 * 0.25) ** 2))
    # ban_after 2, one message a round, every message caught: banned at round 2 exactly
    assert expected_ban_round(1.0, Setting(fraction=1.0, messages=1, ban_after=2)) == pytest.approx(2.0)


def test_the_default_setting_makes_cheating_lose_at_every_poison_rate():
    for p in (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0):
        assert expected_gain(p, DEFAULT) < 0, p
        assert break_even_benefit(p, DEFAULT) > DEFAULT.benefit
    # and a lax setting does not: three strikes at 10 % coverage let a 5 % poisoner come out ahead
    assert expected_gain(0.05, dataclasses.replace(DEFAULT, ban_after=3)) > 0


@pytest.mark.parametrize("setting,p", [(DEFAULT, 0.3), (Setting(ban_after=2, position_fraction=0.25, bad_positions=2), 1.0)])
def test_simulation_with_the_real_checker_matches_the_closed_forms(setting, p):
    sim = simulate(p, setting, trials=600, seed=1, rounds=400)
    assert abs(sim["gain"]["mean"] - expected_gain(p, setting)) < 4 * sim["gain"]["se"]
    assert abs(sim["ban_round"]["mean"] - expected_ban_round(p, setting)) < 4 * sim["ban_round"]["se"]
    assert sim["ban_round"]["banned_share"] == 1.0


def test_bad_setting_refused():
    with pytest.raises(ValueError, match="fraction must be in"):
        Setting(fraction=0)
    with pytest.raises(ValueError, match="ban_after must be"):
        Setting(ban_after=0)


def test_a_cheater_that_poisons_only_its_last_rounds_gains_at_the_default_setting():
    """Review u36 A: honest until its last round, then every message poisoned, the cheater forfeits nothing after
    a ban: 8 messages, each accepted with 0.9 and worth 2, against 8 honest ones."""
    assert hit_and_run_gain(1, DEFAULT) == pytest.approx(8 * (0.9 * 2 - 1))  # +6.4
    # two last rounds: the second is played only if none of the first round's 8 messages was caught (0.9^8)
    assert hit_and_run_gain(2, DEFAULT) == pytest.approx(8 * 0.9 * 2 * (1 + 0.9 ** 8) - 16)
    assert best_hit_and_run(DEFAULT) == (1, pytest.approx(6.4))
    # it stops paying at f = b / (1 + b) = 0.5 (every position checked): (1 - 0.5) * 2 = 1
    assert deterring_fraction(DEFAULT) == pytest.approx(0.5)
    assert hit_and_run_gain(1, dataclasses.replace(DEFAULT, fraction=0.5)) == pytest.approx(0.0)
    assert deterring_fraction(dataclasses.replace(DEFAULT, position_fraction=0.25)) == math.inf  # 0.5 / 0.25 > 1
    # what stays bounded: poisons accepted per identity = 8 * 0.9 * E[ban round] = 7.2 / (1 - 0.9^8)
    assert poisons_per_identity(DEFAULT) == pytest.approx(7.2 / (1 - 0.9 ** 8))
    with pytest.raises(ValueError, match="k must be in 1..12"):
        hit_and_run_gain(13, DEFAULT)


@pytest.mark.parametrize("k", [1, 2])
def test_the_hit_and_run_closed_form_matches_the_simulation_with_the_real_checker(k):
    sim = simulate(1.0, DEFAULT, trials=1500, seed=5, start=DEFAULT.horizon - k)
    assert abs(sim["gain"]["mean"] - hit_and_run_gain(k, DEFAULT)) < 4 * sim["gain"]["se"]
