"""The clocked schedule's config fields (``swarm.protocol.schedule``, ``round_s``, ``direct_s``, ``relay_s``: task
h31v; ``max_skips``: task h31k): their defaults, their one-line checks, and the serializer that leaves them out while
unset. What the schedule does is :mod:`dgrpo.transports.clocked`."""

from __future__ import annotations

import math

MIN_RELAY_S = 2.0  # the least relay_s accepted: an honest relay's build after a cap-size payload read just before A_n


AUTO_WINDOW_S = 4.0  # direct_s and relay_s unset with round_s=auto: sized for a transfer, not for the round (below)


def windows(protocol, round_s: float | None = None) -> tuple[float, float, float]:
    """(round_s, a, b) of a ``swarm.protocol`` config, seconds. ``a`` and ``b`` default to round_s / 4 each; with
    ``round_s: auto`` to :data:`AUTO_WINDOW_S` each (a window must hold an honest transfer, a payload at its byte cap
    or a relay, and its decode, which does not grow with the round's compute: a quarter of an agreed 120 s round
    would be 30 s of waiting per window), and ``round_s`` is the agreed value passed in (None before the agreement:
    nan)."""
    r = protocol.round_s
    auto = r == "auto"
    if auto:
        r = math.nan if round_s is None else round_s
    default = AUTO_WINDOW_S if auto else r / 4
    return r, (protocol.direct_s if protocol.direct_s is not None else default), \
        (protocol.relay_s if protocol.relay_s is not None else default)


def round_s_value(cls, value):
    """``swarm.protocol.round_s`` as given: None, ``auto`` or a number in (0, a week] are passed on; anything else is
    one line (pydantic names each member of the union apart: a number or a word)."""
    if value is None or value == "auto":
        return value
    if isinstance(value, str):
        raise ValueError(f"Input should be a number of seconds or auto (got {value[:40]!r})")
    if not isinstance(value, (int, float)):  # (a list, a mapping: review r31p; a bool: the registry's own line)
        raise ValueError(f"Input should be a number of seconds or auto (got a {type(value).__name__})")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 < value <= 7 * 86400:
        raise ValueError(f"Input should be greater than 0 and at most a week, 604800 s (got {value:g})")
    return value


def relative_left_out(self, handler) -> dict:
    """``swarm.protocol``'s serializer: the clock fields left out while unset (``schedule=relative``, no round_s), so
    a config, its YAML and its fingerprint are those of before the fields existed."""
    data = handler(self)
    if data.get("schedule") == "relative":
        data.pop("schedule")
    for key in ("round_s", "direct_s", "relay_s", "max_skips"):
        if data.get(key) is None:
            data.pop(key, None)
    return data


def check(swarm) -> None:
    """Validate the clocked-schedule fields of a ``swarm`` config (called by ``SwarmConfig``'s validator).

    Raises:
        ValueError: one line naming the field and the fix.
    """
    p = swarm.protocol
    if p.schedule != "clock":
        given = [f for f, v in (("round_s", p.round_s), ("direct_s", p.direct_s), ("relay_s", p.relay_s),
                                ("max_skips", p.max_skips)) if v is not None]
        if given:
            raise ValueError(f"swarm.protocol.{given[0]} is used only with swarm.protocol.schedule=clock; set "
                             "swarm.protocol.schedule=clock or leave it out")
        return
    if swarm.transport != "distributed":
        raise ValueError(f"swarm.protocol.schedule=clock is built for swarm.transport=distributed only (got "
                         f"{swarm.transport!r}); set swarm.protocol.schedule=relative")
    if p.round_s is None:
        raise ValueError("swarm.protocol.schedule=clock needs swarm.protocol.round_s (seconds between two rounds' post "
                         "deadlines, more than a round's compute + direct_s + relay_s), e.g. swarm.protocol.round_s=30")
    r, a, b = windows(p)
    if p.round_s == "auto" and a + b >= swarm.timeout_s:
        raise ValueError(f"swarm.protocol.round_s=auto takes at most swarm.timeout_s={swarm.timeout_s:g}s a round, "
                         f"which must exceed swarm.protocol.direct_s + swarm.protocol.relay_s ({a:g} + {b:g}s); raise "
                         "swarm.timeout_s or lower direct_s / relay_s")
    if p.round_s != "auto" and a + b >= r:
        raise ValueError(f"swarm.protocol.direct_s + swarm.protocol.relay_s ({a:g} + {b:g}s) must be less than "
                         f"swarm.protocol.round_s={r:g}s (what is left is each round's compute); raise round_s or "
                         "lower direct_s / relay_s")
    if b < MIN_RELAY_S:
        raise ValueError(f"swarm.protocol.relay_s={b:g}s is below {MIN_RELAY_S:g}s: an attacker can serve one node a "
                         "payload at its byte cap just before A_n, whose decode delays that node's relay past B_n "
                         f"(docs/distributed.md, Clocked rounds); set swarm.protocol.relay_s={MIN_RELAY_S:g} or more "
                         "(unset, it is round_s / 4)")


TIMED = ("replay", "tolerant_replay", "topk", "step_checker", "reward_outlier")  # defense kinds round_s: auto may run
# beside (roundtime times a regenerating replay; the others' one forward or arithmetic per group is inside SAFETY); any
# other kind (judge: generation or endpoint calls, toploc: a prefill of every received completion, a kind added later)
# is refused until it is timed: an allow-list fails closed


def check_untimed(run) -> None:
    """``round_s: auto`` with a defense whose cost the estimate does not time (a kind not in :data:`TIMED`: a judge's
    generation or endpoint calls, TOPLOC's prefill of every received completion, both on the attacker's completions at the cap):
    refused in one line (review r31p: the agreed round could not hold them, so every honest node would skip every round)."""
    kinds = [d.kind for d in run.defenses if d.kind not in TIMED]
    if run.swarm.protocol.round_s == "auto" and kinds:
        raise ValueError(f"swarm.protocol.round_s=auto does not time the {kinds[0]} defense (its work on every received "
                         "completion, the attacker's at the length cap, inside each round's compute window): set "
                         "swarm.protocol.round_s to seconds sized for it (docs/distributed.md, round_s: auto)")
