"""Clocked rounds (``swarm.protocol.schedule=clock``, :mod:`dgrpo.transports.clocked`) with in-process ranks on one
store (:func:`signed_ranks._ranks`, real servers): the failure lines name the clock's settings (task h31k item 3)."""

import time
from pathlib import Path

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


# ------------------------------------------------------------------ signed skip notices (task h31k item 1)
def _skipping(max_skips=2, t0_ago=0.05):
    """3 ranks on one clock (``P_0`` ``t0_ago`` seconds ago, direct_s = relay_s = 2 s), each with its Skips; nodes 0
    and 1 served their ``r0``; node 2's watcher serves its notice at ``P_0`` (its payload not ready)."""
    from dgrpo.transports.skips import Skips

    ts, _ = _ranks(n=3)
    _clocked(ts, time.time() - t0_ago)
    for t in ts:
        t.skips = Skips(t, max_skips)
    a, b, c = ts
    c.skips.watch(0)
    for t in (a, b):
        t.skips.claim(0, True)
        t.exchanger.post("r0", f"r0 of {t.rank}".encode())
    return ts


def _accused(t) -> list:
    return list(t.ledger._own)


def test_an_honest_node_late_alone_serves_a_signed_notice_and_nobody_accuses_it():
    """Before: node 2 (its compute past P_0) served nothing, nodes 0 and 1 missed it at A_0 and accused it, 2 of 3:
    expelled for computing slowly. Now its watcher serves a signed notice at P_0: not accused of r0 nor of eq0, not
    failed, still live; its payload is in no set (nobody read one)."""
    a, b, c = _skipping()
    for t in (a, b):
        got = clocked.collect(t, "r0", range(3), time.monotonic() + 0.6, 1 << 20)
        assert set(got) == {1 - t.rank} and _accused(t) == [] and set(t.skips.held[0]) == {2}
        assert t.alive == {0, 1, 2} and t.failed == {}
        assert t.rejected == [(2, "skip: node 2 served its signed skip notice of round 0, honoured "
                                  "(swarm.protocol.max_skips=2)")]  # (named in peers.jsonl, never a strike: task h31h)
    assert c.skips.claim(0, True) is False  # (its payload, ready now, is not served: the notice was)
    b.exchanger.post("eq0", b"relay of 1")
    got = clocked.collect(a, "eq0", range(3), time.monotonic() + 0.4, 1 << 20)
    assert set(got) == {1} and _accused(a) == [] and a.alive == {0, 1, 2}
    c.skips.stop()


def test_a_node_missing_from_the_sets_past_max_skips_rounds_is_accused_whatever_it_was_shown():
    """The bound is counted on the round sets (one at every honest node), never on the notices a reader was shown: a
    rank that shows its notice to one honest node a round, in turn, is refused alike by all once its messages were
    in none of the last max_skips sets."""
    a, b, c = _skipping(max_skips=2)
    for t in (a, b):  # (round 0: within the first max_skips rounds: honoured)
        clocked.collect(t, "r0", range(3), time.monotonic() + 0.4, 1 << 20)
        t.skips.settle(0, {0, 1})
    assert a.skips.honoured(2, 1) and not a.skips.honoured(2, 2)  # (rounds 0, 1 out of the sets: round 2 is not)
    assert b.skips.honoured(2, 1) and not b.skips.honoured(2, 2)
    a.skips.held.clear()  # (node 0 was never shown a notice: the same decision)
    assert not a.skips.honoured(2, 2) and a.skips.honoured(2, 1)
    a.skips.settle(1, {0, 1, 2})  # (node 2's messages in round 1's set: two more rounds)
    assert a.skips.honoured(2, 3) and not a.skips.honoured(2, 4)
    c.skips.stop()


def test_a_notice_past_max_skips_is_a_missing_payload():
    a, b, c = _skipping(max_skips=0)  # (0: no notice honoured: the clock as before)
    got = clocked.collect(a, "r0", range(3), time.monotonic() + 0.4, 1 << 20)
    assert set(got) == {1} and _accused(a) == [(2, "r0")] and set(a.skips.held[0]) == {2}
    assert not [r for _, r in a.rejected if r.startswith("skip")]  # (past max_skips: accused as missing, not a skip)
    c.skips.stop()


def test_a_notice_in_another_name_or_of_another_round_is_a_payload_not_a_notice():
    from dgrpo.transports.skips import notice, read_notice

    a, b, c = _skipping(t0_ago=-60)  # (P_0 a minute ahead: the watcher serves nothing)
    mine = notice(c, 0)
    assert read_notice(a, 2, 0, mine) and not read_notice(a, 2, 1, mine)  # (a replay for round 1)
    assert not read_notice(a, 1, 0, mine)  # (node 2's notice served as node 1's)
    forged = mine.replace(b'"by": 2', b'"by": 1')  # (node 2's signature in node 1's name)
    assert not read_notice(a, 1, 0, forged) and not read_notice(a, 2, 0, mine[:-3] + b"00}")
    c.skips.stop()


def test_an_honest_nodes_notice_of_an_earlier_launch_names_it_nowhere():
    """Review r31h (the 'skip' entry of peers.jsonl and the equivocation a relayed notice makes, task h31h): an honest
    node 2 that skipped round 0 in an earlier launch of the run (a ``dgrpo resume`` starts again at that round) and
    served its payload in this one. The attacker holds the old notice, re-spelled or not: read as node 2's payload
    it is no notice (no 'skip' under node 2), and relayed in the attacker's ``eq0`` it makes no equivocation of node
    2's messages. Only node 2's signature for this run, launch and round names it."""
    import json
    from types import SimpleNamespace

    from dgrpo.transports import relay
    from dgrpo.transports.framing import KeyCaps
    from dgrpo.transports.skips import PREFIX, notice, read_notice

    a, b, c = _skipping(t0_ago=-60)
    now = c.signed_store.nonce
    c.signed_store.nonce = "0" * 32  # (the earlier launch's nonce: what node 2 signed its notice under then)
    old = notice(c, 0)
    c.signed_store.nonce = now
    line = json.loads(old[len(PREFIX):])
    respelled = PREFIX + json.dumps({"sig": line["sig"].upper(), "round": 0, "by": 2}, indent=1).encode()
    for raw in (old, respelled):
        assert not read_notice(a, 2, 0, raw) and not read_notice(b, 2, 0, raw), raw
    assert read_notice(a, 2, 0, notice(c, 0))  # (this launch's: a notice)
    merged = [SimpleNamespace(node=k) for k in (0, 1, 2)]
    for raw in (old, respelled):
        relayed = relay.build(1, [], [], {}, [], {}, KeyCaps(1, 1, 1 << 20), 3, "eq0",
                              skipped={"2": raw[len(PREFIX):].decode()})
        assert a.skips.two_faced(0, {1: relayed}, merged) == {}
    c.skips.stop()


def test_a_named_skip_strikes_nobody_at_ban_after_1_and_counts_no_refused_message():
    """Review r31h (task h31h's 'skip' entry): node 2's honoured notice, as the round's record takes it from the
    transport, is under node 2's ``transport`` column only: no strike, no ban at ``ban_after=1``, no refused message in
    the record or the report's per-peer series, nothing under any other node."""
    from dgrpo.report.data import RunData, peer_series
    from dgrpo.swarm.accounting import account_round
    from dgrpo.swarm.protocol import BanList
    from dgrpo.training.records import PolicyReport, peer_record

    a, b, c = _skipping()
    clocked.collect(a, "r0", range(3), time.monotonic() + 0.6, 1 << 20)
    assert [n for n, r in a.rejected if r.startswith("skip:")] == [2]
    rec = peer_record(0, PolicyReport([], []), None, a.rejected)
    assert rec["peers"] == {"2": {"received": 0, "accepted": 0, "rejected": {}, "defense": {}, "duplicates": 0,
                                  "transport": {"skip": 1}}}
    bans = BanList(1)
    account_round(bans, rec, {0}, 0, None)
    assert rec["banned"] == {} and bans.banned == {}
    assert peer_series(RunData(Path("run"), {}, [], peers=[rec])) == {"2": ([0], [0])}
    c.skips.stop()


def test_payload_or_notice_is_decided_once_never_both():
    a, b, c = _skipping(t0_ago=-60)
    assert c.skips.claim(0, True) is True  # (ready before P_0: its payload; the watcher serves no notice then)
    assert c.skips.claim(0, False) is True
    c.skips.stop()


def test_a_notice_and_messages_of_one_round_are_equivocation_for_every_honest_node_alike():
    """Rank 2 shows node 0 its notice of round 0 and node 1 its payload: node 0 relays the notice (``skipped`` in its
    eq0), so node 1 holds both as node 0 does, and both drop rank 2's round-0 messages (``equivocation``), as two
    signed contents for one slot. A notice relayed only by its own signer, or read by nobody, counts nowhere."""
    import json
    from types import SimpleNamespace

    from dgrpo.transports import relay
    from dgrpo.transports.framing import KeyCaps
    from dgrpo.transports.skips import PREFIX, notice

    a, b, c = _skipping(t0_ago=-60)
    a.skips.hold(2, 0, notice(c, 0))  # (node 0 read rank 2's notice by A_0; node 1 read its payload)
    merged = [SimpleNamespace(node=k) for k in (0, 1, 2)]  # (rank 2's messages in both sets: node 1 relayed them)
    raw = relay.build(0, [], [], {}, [], {}, KeyCaps(1, 1, 1 << 20), 3, "eq0", skipped=a.skips.relayed(0))
    assert set(json.loads(raw)["skipped"]) == {"2"}
    for t, reports in ((a, {1: b"{}"}), (b, {0: raw})):
        why = t.skips.two_faced(0, reports, merged)
        assert list(why) == [2] and why[2].startswith("equivocation: node 2 signed a skip notice for round 0"), why
    own = relay.build(2, [], [], {}, [], {}, KeyCaps(1, 1, 1 << 20), 3, "eq0", skipped={"2": notice(c, 0)[len(PREFIX):].decode()})
    assert b.skips.two_faced(0, {2: own}, merged) == {}  # (its own relay vouches for nothing of its own)
    assert b.skips.two_faced(0, {0: raw}, merged[:2]) == {}  # (a notice and no messages: a skip)
    c.skips.stop()


def test_a_round_this_node_entered_too_late_to_see_counts_against_no_peer_later():
    """A node that enters round 0 past ``B_0`` (an honest node late by a load spike: outside the clock's assumptions)
    reads no set of round 0; it blames nobody in that round, but before it settled round 0 with an empty set, so its
    ``last_in`` lagged its peers' by a round: a peer in round 0's set (at every other node) that then skipped rounds 1
    and 2 was honoured there and refused here, and this node accused it of r2 on time (with the attacker, 2 of 3 in a
    swarm of 3: an honest node expelled). Now a round this node could not see counts every live peer in."""
    from dgrpo.transports.skips import Skips

    ts, _ = _ranks(n=3)
    _clocked(ts, time.time() - 5.0)  # (B_0 = P_0 + 4 s: a second ago)
    a, b, _c = ts
    for t in (a, b):
        t.skips = Skips(t, 2)
    assert clocked.gather_round(a, [], 0) == []  # (late past B_0: reads nothing, blames nobody)
    assert _accused(a) == []
    b.skips.settle(0, {0, 1, 2})  # (an on-time node: node 2's messages in round 0's set)
    assert b.skips.honoured(2, 2) and not b.skips.honoured(2, 3)
    assert a.skips.honoured(2, 2) and not a.skips.honoured(2, 3)  # (before: not honoured at round 2 here)
    a.skips.stop()


# ------------------------------------------------------------------ the run's first round (task h31m item 3)
@pytest.mark.parametrize("first", [0, 5])  # (a fresh run; a run resumed at round 5)
def test_a_node_late_alone_in_the_runs_first_round_serves_its_notice_and_nobody_accuses_it(first):
    """Before, the watcher started after the run's first round here: node 2, still in its first compute at ``T0`` (its
    first evaluation, a first compile, a slower host), served nothing; nodes 0 and 1 missed it at ``A_first`` and
    accused it, 2 of 3: expelled. Now the training loop's ``starts_at(first)`` arms the watcher for round ``first``
    (``T0`` its post deadline): node 2 serves its signed notice at ``T0``, is accused by nobody and its payload, ready
    later, is not served. The notice counts as any other: rounds before ``first`` count as rounds node 2 was in, so
    it has ``max_skips`` rounds from the start, then every honest node refuses its notice alike."""
    from dgrpo.transports.skips import PREFIX, Skips

    ts, _ = _ranks(n=3)
    t0 = time.time() + 0.3  # (the agreed T0, ahead: every node is still in its first compute)
    for t in ts:
        t.clock = Clock(t0, 10.0, 1.0, 2.0, first=None)  # (as agree_start returns it: the first round not yet known)
        t.exchanger.bounds = lambda tag, t=t: clocked.bound_of(t.clock, tag)
        t.skips = Skips(t, 2)  # (as check_startup makes it)
        t.starts_at(first)  # (as the training loop does, before the first round's evaluation)
    a, b, c = ts
    assert [t.clock.post_by(first) for t in ts] == [t0] * 3
    for t in (a, b):  # (on time)
        assert t.skips.claim(first, True)
        t.exchanger.post(f"r{first}", f"r{first} of {t.rank}".encode())
    for t in (a, b):  # (node 2's main thread never comes: its watcher alone serves at T0)
        got = clocked.collect(t, f"r{first}", range(3), clocked._mono(t.clock.direct_until(first)), 1 << 20)
        assert set(got) == {1 - t.rank} and _accused(t) == [] and set(t.skips.held[first]) == {2}  # (before: [(2, r)])
        assert t.alive == {0, 1, 2} and t.failed == {}
    assert c.chan.values[f"r{first}/data/2"].startswith(PREFIX) and c.skips.claim(first, True) is False
    for t in (a, b):  # (round `first` settled without node 2: its rounds first, first + 1 honoured, first + 2 not)
        t.skips.settle(first, {0, 1})
        assert t.skips.honoured(2, first + 1) and not t.skips.honoured(2, first + 2)
    c.skips.stop()


def test_the_training_loop_arms_the_transport_for_its_first_round_before_anything_else(tmp_path):
    """``train`` tells the transport its first round (a resumed run's: ``run.start_round``) before that round's
    evaluation and compute, once."""
    from types import SimpleNamespace

    from dgrpo.config import load_config
    from dgrpo.training.loop import train

    calls = []
    cfg = load_config(overrides=[f"out_dir={tmp_path}", "rounds=5", "eval.every=10", "eval.first=false"])
    run = SimpleNamespace(cfg=cfg, start_round=3, run_dir=tmp_path,
                          transport=SimpleNamespace(is_main=False, local_nodes=[1], starts_at=calls.append))

    def one_round(run, r):
        calls.append(("round", r))
        raise PeerFailure("stop here")

    with pytest.raises(PeerFailure):
        train(run, one_round)
    assert calls == [3, ("round", 3)]
