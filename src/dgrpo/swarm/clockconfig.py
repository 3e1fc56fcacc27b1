"""The clocked schedule's config fields (``swarm.protocol.schedule``, ``round_s``, ``direct_s``, ``relay_s``: task
h31v; ``max_skips``: task h31k): their defaults, their one-line checks, and the serializer that leaves them out while
unset. What the schedule does is :mod:`dgrpo.transports.clocked`."""

from __future__ import annotations

MIN_RELAY_S = 2.0  # the least relay_s accepted: an honest relay's build after a cap-size payload read just before A_n


def windows(protocol) -> tuple[float, float, float]:
    """(round_s, a, b) of a ``swarm.protocol`` config (a and b default to round_s / 4 each)."""
    r = protocol.round_s
    return r, (protocol.direct_s if protocol.direct_s is not None else r / 4), \
        (protocol.relay_s if protocol.relay_s is not None else r / 4)


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
    if a + b >= r:
        raise ValueError(f"swarm.protocol.direct_s + swarm.protocol.relay_s ({a:g} + {b:g}s) must be less than "
                         f"swarm.protocol.round_s={r:g}s (what is left is each round's compute); raise round_s or "
                         "lower direct_s / relay_s")
    if b < MIN_RELAY_S:
        raise ValueError(f"swarm.protocol.relay_s={b:g}s is below {MIN_RELAY_S:g}s: an attacker can serve one node a "
                         "payload at its byte cap just before A_n, whose decode delays that node's relay past B_n "
                         f"(docs/distributed.md, Clocked rounds); set swarm.protocol.relay_s={MIN_RELAY_S:g} or more "
                         "(unset, it is round_s / 4)")
