"""Clocked rounds (``swarm.protocol.schedule=clock``, :mod:`dgrpo.transports.clocked`) with in-process ranks on one
store (:func:`signed_ranks._ranks`, real servers): the failure lines name the clock's settings (task h31k item 3)."""

import time

import pytest

from dgrpo.errors import PeerFailure
from dgrpo.transports import clocked
from dgrpo.transports.clocked import Clock

from signed_ranks import _ranks


def _clocked(ts, t0: float, round_s=10.0, direct_s=2.0, relay_s=2.0):
    """Put every transport of ``ts`` on one clock (as check_startup does after agree_start)."""
    for t in ts:
        t.clock = Clock(t0, round_s, direct_s, relay_s, first=0)
        t.exchanger.bounds = lambda tag, t=t: clocked.bound_of(t.clock, tag)


@pytest.mark.parametrize("tag, field", [("r0", "swarm.protocol.direct_s=0.6s"), ("eq0", "swarm.protocol.relay_s=2s")])
def test_a_clocked_failure_line_names_the_clock_setting_not_timeout_s(tag, field):
    """Under abort, a peer missing at the clock's deadline is named in one line within the setting that bounds the
    exchange (direct_s for r{n}, relay_s for eq{n}); before: ``within swarm.timeout_s=5s``, a wait that never ran."""
    ts, _ = _ranks(n=3)
    _clocked(ts, time.time() - (0.6 if tag.startswith("eq") else 0.0), direct_s=0.6)
    a, b, _c = ts
    a.exchanger.on_peer_failure = "abort"
    b.exchanger.post(tag, b"payload of 1")
    a.exchanger.post(tag, b"payload of 0")
    with pytest.raises(PeerFailure) as err:
        clocked.collect(a, tag, range(3), time.monotonic() + 0.4, 1 << 20)
    line = str(err.value)
    assert f"node 2 sent nothing for exchange {tag!r} within {field}" in line, line
    assert "swarm.timeout_s" not in line and "\n" not in line


def test_the_bounds_of_the_clock():
    clock = Clock(0.0, 8.0, 2.0, 3.0)
    assert clocked.bound_of(clock, "r4") == ("swarm.protocol.direct_s", 2.0)
    assert clocked.bound_of(clock, "eq4") == ("swarm.protocol.relay_s", 3.0)
    assert clocked.bound_of(clock, None) == ("swarm.protocol.round_s", 8.0)
    assert clocked.bound_of(clock, "rec4") is None and clocked.bound_of(clock, "done") is None
