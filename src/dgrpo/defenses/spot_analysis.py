"""What spot checks buy against a cheater (issue 36): closed forms, and a simulation with the real checker.

The model. A cheater sends ``n`` messages a round to a receiver and poisons each with probability ``p``
(independently). The receiver checks each message with probability ``f`` (``spot_fraction``) and each
position of a checked message with probability ``q`` (``position_fraction``); a poisoned message with
``j`` departing tokens is caught, when checked, with probability c = 1 − (1 − q)^j (c = 1 at q = 1). A
caught message is a strike; ``ban_after`` strikes ban the cheater from the next round on
(:class:`dgrpo.swarm.protocol.BanList`). With h receivers that share their catches (a caught message is
signed by its sender, so it is a proof any node re-checks at the cost of one message), a poisoned message
escapes only when every receiver misses it: s = p · (1 − (1 − f·c)^h) per message.

Then, per round, strikes ~ Binomial(n, s): the cheater is caught in a round with probability
1 − (1 − s)^n, it is still admitted in round r (1-based) with probability a_r = P[Binomial(n(r−1), s) <
ban_after], and the round of its ban has expectation Σ_{r ≥ 1} a_r (the ban takes effect the round after).

Gain. Each accepted honest message is worth 1 to its sender (a payment, or its share of the swarm's
update), each accepted poisoned message 1 + ``benefit`` (what the poison is worth to it beyond an honest
message), a caught or refused message 0. Over ``horizon`` rounds the cheater's expected gain over
sending honestly is

    Σ_{r=1}^{H} a_r · n · ((1 − p) + p · (1 − f·c)(1 + benefit))  −  n · H.

It is below zero when the value lost after the ban outweighs what the unchecked poison adds before it.

A cheater that chooses *when* to poison (review u36 A) is not held by that: honest until its last ``k`` rounds
(the rounds before it means to leave, or the run's last), it poisons every message of them and forfeits only
those rounds' value after a ban. Its gain is Σ_{i=1}^{k} a_i(p = 1) · n · (1 − f·c)(1 + b) − n · k
(:func:`hit_and_run_gain`; k = 1: n((1 − f·c)(1 + b) − 1), +6.4 at the default setting), below zero only for
f·c ≥ b / (1 + b) (:func:`deterring_fraction`). What spot checks bound against it is the number of poisons a
roster identity gets accepted, whenever it sends them: n (1 − f·c) Σ_{i≥1} a_i(p = 1)
(:func:`poisons_per_identity`; 12.6 at the default setting, one receiver).
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One spot-check setting and the cheater's situation (see the module docstring for each symbol).

    Attributes:
        fraction: f, ``spot_fraction``. position_fraction: q. bad_positions: j, departing tokens of a poisoned message.
        ban_after: strikes that ban (≥ 1). messages: n a round. horizon: H rounds. benefit: b.
        receivers: h receivers sharing their catches (1: one receiver alone).
    """

    fraction: float = 0.1
    position_fraction: float = 1.0
    bad_positions: int = 1
    ban_after: int = 1
    messages: int = 8
    horizon: int = 12
    benefit: float = 1.0
    receivers: int = 1

    def __post_init__(self):
        for name in ("fraction", "position_fraction"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"Setting: {name} must be in (0, 1], got {getattr(self, name)!r}")
        for name in ("bad_positions", "ban_after", "messages", "horizon", "receivers"):
            if getattr(self, name) < 1:
                raise ValueError(f"Setting: {name} must be ≥ 1, got {getattr(self, name)!r}")


# The default setting of docs/verification.md: spot_fraction 0.1, every position, ban_after 1, and the default
# run's cheater (4 nodes, horizontal, G = 8: 8 messages a node a round, 12 rounds), a poison worth 2 honest messages.
DEFAULT = Setting()


def caught_if_checked(s: Setting) -> float:
    """c: probability that a checked poisoned message is caught."""
    return 1 - (1 - s.position_fraction) ** s.bad_positions


def strike_probability(p: float, s: Setting) -> float:
    """Probability that one message of a cheater poisoning a share ``p`` is a strike."""
    return p * (1 - (1 - s.fraction * caught_if_checked(s)) ** s.receivers)


def caught_per_round(p: float, s: Setting) -> float:
    """Probability that at least one of the cheater's n messages of a round is caught."""
    return 1 - (1 - strike_probability(p, s)) ** s.messages


def _below(k: int, trials: int, prob: float) -> float:
    """P[Binomial(trials, prob) < k]."""
    if prob <= 0:
        return 1.0
    return sum(math.comb(trials, i) * prob ** i * (1 - prob) ** (trials - i) for i in range(min(k, trials + 1)))


def admitted(p: float, s: Setting, round_no: int) -> float:
    """a_r: probability that the cheater is not yet banned in round ``round_no`` (1-based)."""
    return _below(s.ban_after, s.messages * (round_no - 1), strike_probability(p, s))


def expected_ban_round(p: float, s: Setting, limit: int = 1_000_000) -> float:
    """Expected round (1-based) of the ban's strike: Σ_{r≥1} P[not banned after r − 1 rounds] (inf when
    no message can be a strike; the sum is cut once its terms fall below 1e-12 or at ``limit`` rounds)."""
    if strike_probability(p, s) == 0:
        return math.inf
    total, r = 0.0, 1
    while r <= limit:
        term = admitted(p, s, r)
        total += term
        if term < 1e-12:
            break
        r += 1
    return total


def expected_gain(p: float, s: Setting) -> float:
    """The cheater's expected gain over sending honestly across the horizon (module docstring), in
    honest-message units."""
    per_round = s.messages * ((1 - p) + p * (1 - s.fraction * caught_if_checked(s)) * (1 + s.benefit))
    return sum(admitted(p, s, r) * per_round for r in range(1, s.horizon + 1)) - s.messages * s.horizon


def break_even_benefit(p: float, s: Setting) -> float:
    """The benefit b at which the expected gain is zero (the gain is linear in b, increasing): below it
    cheating loses. inf when no poisoned message ever enters (p = 0 or every one is caught)."""
    import dataclasses

    at_zero = expected_gain(p, dataclasses.replace(s, benefit=0.0))
    slope = sum(admitted(p, s, r) for r in range(1, s.horizon + 1)) * s.messages * p * (1 - s.fraction * caught_if_checked(s))
    return math.inf if slope == 0 else -at_zero / slope


def hit_and_run_gain(k: int, s: Setting) -> float:
    """The expected gain over sending honestly of a cheater honest until its last ``k`` rounds of the horizon
    (1 ≤ k ≤ H) that poisons every message of those (module docstring), in honest-message units.

    Raises:
        ValueError: ``k`` outside 1..H.
    """
    if not 1 <= k <= s.horizon:
        raise ValueError(f"hit_and_run_gain: k must be in 1..{s.horizon} (the horizon), got {k!r}")
    per_round = s.messages * (1 - s.fraction * caught_if_checked(s)) * (1 + s.benefit)
    return sum(admitted(1.0, s, i) * per_round for i in range(1, k + 1)) - s.messages * k


def best_hit_and_run(s: Setting) -> tuple[int, float]:
    """(k, gain): the number of last rounds to poison that pays a hit-and-run cheater best, and its gain."""
    return max(((k, hit_and_run_gain(k, s)) for k in range(1, s.horizon + 1)), key=lambda kg: kg[1])


def deterring_fraction(s: Setting) -> float:
    """The smallest ``spot_fraction`` f at which poisoning one last round does not pay:
    (1 − f·c)(1 + b) ≤ 1, i.e. f ≥ b / ((1 + b) c); inf where no f ≤ 1 reaches it (c too small)."""
    need = s.benefit / ((1 + s.benefit) * caught_if_checked(s))
    return need if need <= 1 else math.inf


def poisons_per_identity(s: Setting) -> float:
    """Expected poisoned messages a cheater that poisons every message gets accepted before its ban (one roster
    identity, whenever it starts): n (1 − f·c) · E[ban round] at p = 1 (inf when nothing is ever caught)."""
    return s.messages * (1 - s.fraction * caught_if_checked(s)) * expected_ban_round(1.0, s)


def simulate(p: float, s: Setting, trials: int, seed: int = 0, rounds: int | None = None, start: int = 0) -> dict:
    """Play the model with the real checker (:class:`dgrpo.verify.spot.SpotChecker`, a fresh secret per
    trial and receiver) and ban list (:class:`dgrpo.swarm.protocol.BanList`, catches shared).

    Args:
        rounds: rounds played per trial for the ban round (default ``s.horizon``; a trial not banned by
            then counts as banned at ``rounds`` + 1, so give a long one to estimate the expectation).
        start: the 0-based round from which the cheater poisons at rate ``p`` (honest before: a hit-and-run
            cheater over its last k rounds has ``start`` = H − k and p = 1).

    Returns:
        ``gain`` (mean and standard error over trials, over the horizon), ``caught_per_round`` (share of
        admitted rounds with a catch), ``ban_round`` (mean, standard error, share banned within ``rounds``).
    """
    from dgrpo.swarm.protocol import BanList
    from dgrpo.verify.spot import SpotChecker, rollout_digest

    rounds = max(rounds or s.horizon, s.horizon)
    rng = random.Random(seed)
    ban_log = logging.getLogger("dgrpo.swarm.protocol")
    level = ban_log.level
    ban_log.setLevel(logging.ERROR)  # (a ban warning per trial otherwise)
    try:
        return _play(p, s, trials, rounds, rng, BanList, SpotChecker, rollout_digest, start)
    finally:
        ban_log.setLevel(level)


def _play(p, s, trials, rounds, rng, BanList, SpotChecker, rollout_digest, start=0) -> dict:
    gains, bans, caught_rounds, live_rounds = [], [], 0, 0
    for trial in range(trials):
        checkers = [SpotChecker(s.fraction, s.position_fraction, seed=rng.getrandbits(62)) for _ in range(s.receivers)]
        bans_list, value, ban_round = BanList(s.ban_after), 0.0, rounds + 1
        for r in range(rounds):
            if 7 in bans_list.banned:
                break
            strikes = 0
            for i in range(s.messages):
                poisoned = r >= start and rng.random() < p
                ids = [rng.getrandbits(16) for _ in range(4)]
                digest = rollout_digest((7, r, f"t{trial}", i), i, ids)
                bad = set(rng.sample(range(32), s.bad_positions))  # where a 32-token poisoned message departs
                caught = poisoned and any(c.checks(digest) and ((pos := c.positions(digest, 32)) is None or bad & set(pos))
                                          for c in checkers)
                strikes += caught
                if r < s.horizon:
                    value += 0.0 if caught else (1 + s.benefit if poisoned else 1.0)
            live_rounds += r < s.horizon
            caught_rounds += (r < s.horizon) and strikes > 0
            if bans_list.strike(7, strikes, r):
                ban_round = r + 1
        gains.append(value - s.messages * s.horizon)
        bans.append(ban_round)

    def mean_se(xs):
        m = sum(xs) / len(xs)
        return m, (sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1) / len(xs)) ** 0.5

    g, b = mean_se(gains), mean_se(bans)
    return {"gain": {"mean": g[0], "se": g[1]}, "caught_per_round": caught_rounds / max(live_rounds, 1),
            "ban_round": {"mean": b[0], "se": b[1], "banned_share": sum(x <= rounds for x in bans) / trials},
            "trials": trials, "rounds": rounds}
