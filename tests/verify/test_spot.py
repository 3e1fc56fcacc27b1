"""Verifier-chosen spot checks (dgrpo.verify.spot): the sender cannot steer them, their coverage is the
configured fraction, and a checked poisoned message is caught."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dgrpo.config import load_config
from dgrpo.defenses import build_defense
from dgrpo.metrics.intervals import wilson
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.policy.scoring import group_logits
from dgrpo.types import Rollout
from dgrpo.verify.spot import SpotChecker, rollout_digest

Z = 4.0  # two-sided ≈ 6e-5: the intervals below are wide enough that a fixed example never flakes


def _grind(attacker: SpotChecker, slots: int, tries: int) -> list[bytes]:
    """The digests a sender sends when, for each slot, it tries up to ``tries`` contents and keeps the
    first that ``attacker`` (its model of the verifier) says is not checked."""
    sent = []
    for s in range(slots):
        variants = [rollout_digest((3, 7, f"p{s}", 0), 11, [s, v, 42]) for v in range(tries)]
        sent.append(next((d for d in variants if not attacker.checks(d)), variants[-1]))
    return sent


@settings(max_examples=12, deadline=None, derandomize=True)
@given(fraction=st.sampled_from([0.05, 0.2, 0.5]), verifier=st.integers(0, 2**31), guess=st.integers(0, 2**31))
def test_a_sender_grinding_without_the_secret_is_checked_at_the_fraction(fraction, verifier, guess):
    """The sender grinds its content against its best model of the verifier (the same algorithm, every
    input but the secret): the verifier still checks its messages at ``fraction``. Knowing the secret,
    the same grinding dodges every check (what the secret protects)."""
    if guess == verifier:
        guess += 1
    real = SpotChecker(fraction, seed=verifier)
    n = 800
    sent = _grind(SpotChecker(fraction, seed=guess), n, tries=8)
    lo, hi = wilson(sum(real.checks(d) for d in sent), n, z=Z)
    assert lo <= fraction <= hi
    leaked = _grind(SpotChecker(fraction, seed=verifier), n, tries=32)  # (all 32 checked: 0.5³² a slot)
    assert sum(real.checks(d) for d in leaked) == 0


@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.3, 0.7])
def test_coverage_matches_the_fraction_within_a_binomial_interval(fraction):
    checker = SpotChecker(fraction, position_fraction=fraction, seed=5)
    digests = [rollout_digest((n % 9, 1, f"q{n}", n % 4), n, [n, 1]) for n in range(4000)]
    checked = sum(checker.checks(d) for d in digests)
    lo, hi = wilson(checked, len(digests), z=Z)
    assert lo <= fraction <= hi
    picked = [checker.positions(d, 32) for d in digests[:500]]
    lo, hi = wilson(sum(len(p) for p in picked), 500 * 32, z=Z)
    assert lo <= fraction <= hi
    assert all(p == sorted(set(p)) and all(0 <= t < 32 for t in p) for p in picked)


def test_two_verifiers_choose_independently_and_one_verifier_reproducibly():
    a, b = SpotChecker(0.3, seed=1), SpotChecker(0.3, seed=2)
    digests = [rollout_digest((1, 0, f"x{n}", 0), n, [n]) for n in range(4000)]
    both = sum(a.checks(d) and b.checks(d) for d in digests)
    lo, hi = wilson(both, len(digests), z=Z)
    assert lo <= 0.09 <= hi  # 0.3², as for two independent draws
    assert [a.checks(d) for d in digests] == [SpotChecker(0.3, seed=1).checks(d) for d in digests]
    assert SpotChecker(1.0).checks(digests[0]) and SpotChecker(1.0).positions(digests[0], 5) is None
    # two OS-drawn secrets differ (their choices over 4,000 messages at 0.5 cannot all agree)
    c, d = SpotChecker(0.5), SpotChecker(0.5)
    assert [c.checks(x) for x in digests] != [d.checks(x) for x in digests]


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_fraction_outside_zero_one_refused(bad):
    with pytest.raises(ValueError, match="fraction must be in"):
        SpotChecker(bad)
    with pytest.raises(ValueError, match="position_fraction must be in"):
        SpotChecker(0.5, position_fraction=bad)


def test_config_fields_validated():
    cfg = load_config(overrides=["defenses=[{kind: replay, spot_fraction: 0.25, position_fraction: 0.5}]"])
    assert (cfg.defenses[0].spot_fraction, cfg.defenses[0].position_fraction) == (0.25, 0.5)
    with pytest.raises(Exception, match="spot_fraction"):
        load_config(overrides=["defenses=[{kind: tolerant_replay, spot_fraction: 0}]"])
    with pytest.raises(Exception, match="position_fraction"):
        load_config(overrides=["defenses=[{kind: replay, position_fraction: 1.5}]"])
    with pytest.raises(Exception, match="needs method: fast"):
        load_config(overrides=["defenses=[{kind: replay, method: regenerate, position_fraction: 0.5}]"])


PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=16)


def _flagged(kind, logits, ids, seed, eos):
    """The positions the full check flags one at a time (a position checked alone)."""
    from dgrpo.verify.replay import replay_mismatch
    from dgrpo.verify.tolerant import tolerant_mismatch

    check = replay_mismatch if kind == "replay" else tolerant_mismatch
    return {t for t in range(len(ids)) if check(logits, ids, seed, PARAMS, eos, positions=[t]) is not None}


@pytest.mark.parametrize("kind", ["replay", "tolerant_replay"])
def test_a_checked_poisoned_message_is_caught_an_unchecked_one_passes(kind, model, tokenizer):
    """Half the messages checked; 24 messages with their first token replaced by one outside the top-k:
    each is rejected exactly when the receiver's checker picks it (and, with position_fraction 0.5, picks
    a position the full check flags: the edit, or a later token sampled for the unedited prefix); every
    honest message is accepted."""
    eos = tokenizer.eos_token_id
    prompt, seeds = [5, 6, 7, 8], list(range(24))
    outs = sample(model, [prompt] * 24, seeds, PARAMS, eos, eos)
    honest = [Rollout("p", prompt, o, "", 1, seed=s, key=(1, 0, "p", s)) for o, s in zip(outs, seeds)]
    with torch.no_grad():
        first = group_logits(model, prompt, [[o[0]] for o in outs[:1]], eos)[0, 0]
    outside = next(i for i in range(5, 400) if i not in set(first.topk(10).indices.tolist()) and i != eos)
    edited = [Rollout("p", prompt, [outside] + list(o[1:]), "", 2, seed=s, key=(2, 0, "p", s)) for o, s in zip(outs, seeds)]
    rollouts = honest + edited
    with torch.no_grad():
        logits = group_logits(model, prompt, [r.completion_ids for r in rollouts], eos)
    flagged = [_flagged(kind, logits[24 + i], r.completion_ids, r.seed, eos) for i, r in enumerate(edited)]
    assert all(0 in f for f in flagged)
    for position_fraction in (1.0, 0.5):
        cfg = load_config(overrides=["sampling.max_new_tokens=16", f"defenses=[{{kind: {kind}, spot_fraction: 0.5, "
                                     f"position_fraction: {position_fraction}, spot_seed: 3}}]"])
        defense = build_defense(cfg.defenses[0], cfg, Policy("tiny", model, tokenizer, PARAMS), task=None)
        checker = SpotChecker(0.5, position_fraction, seed=3)
        verdicts = defense.inspect(rollouts, logits)
        assert all(v.accepted for v in verdicts[:24])
        expect = []
        for r, f in zip(edited, flagged):
            d = rollout_digest(r.key, r.seed, r.completion_ids)
            pos = checker.positions(d, len(r.completion_ids))
            hit = sorted(f if pos is None else f & set(pos))
            expect.append(hit[0] if checker.checks(d) and hit else None)
        assert [None if v.accepted else v.position for v in verdicts[24:]] == expect
        assert 0 < expect.count(None) < 24  # some checked and caught, some not
        c = defense.counters
        assert c["spot_checked"] + c["spot_skipped"] == 48
        assert (c["positions_checked"] == c["positions_total"]) == (position_fraction == 1.0)
