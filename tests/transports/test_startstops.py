"""A peer's start-up stop notice met in the first round: every node decides alike from the round's relays whether all
stop (no node read a round-0 message of the signer: review r31h F6) or the signer equivocated (review r31n G5), without
a launch (transports/startstops.py; the 4-rank cases are in test_startup_stop.py and test_startup_unsafe.py)."""

import json
import time

import pytest
from signed_ranks import _ranks

from dgrpo.errors import PeerFailure
from dgrpo.swarm.identity import SignatureVerifier, Signer
from dgrpo.transports import departures, startstops
from dgrpo.types import Message

WHY = "node 3 could not load its model (start-up check failed)"


def _swarm(policy="continue"):
    """4 in-process ranks as after the start-up check, each with the run's verifier, every server resolved (the
    launches proved), in their first round (r0); returns (ranks, keys)."""
    ts, keys = _ranks(n=4)
    verifier = SignatureVerifier(ts[0].signed_store.keys.roster, "run|fp")
    for t in ts:
        t.verifier, t.exchanger.first, t.exchanger.on_peer_failure = verifier, "r0", policy
        for k in range(4):
            assert t.chan.address_of(k) is not None
    return ts, keys


def _notice(t, why=WHY):
    """``t``'s start-up stop notice as PeerChannel.announce_stop writes it (signed by its key for its launch)."""
    ch = t.chan
    return json.dumps({"why": why, "nonce": ch.nonce, "sig": ch.keys.sign(f"stop|{ch.rank}|{why}|{ch.nonce}")})


def _relay(messages=(), departed=None):
    return json.dumps({"messages": [m.to_dict() for m in messages], "rejected": [],
                       "departed": departed or {}}).encode()


def _msg(keys, signer, node, round_idx=0, context="run|fp"):
    return Signer(signer, keys[signer], context).sign(Message(node, round_idx, "p", 0, "hi", (1, 2), 7, "tok"))


def test_a_notice_shown_to_one_node_and_round_messages_read_by_another_make_its_signer_an_equivocator_everywhere():
    """Review r31n G5's shape: node 3's notice reached node 0 alone (its relay carries it), node 3's round-0 messages
    node 1 alone. Every node decides the same: node 3 equivocated (named with both, out of the swarm), nobody stops;
    node 0, which held node 3 since r0, names it without taking it out twice."""
    ts, keys = _swarm()
    m3 = [_msg(keys, 3, 3)]
    reports = {0: _relay(departed={"3": {"stop": _notice(ts[3])}}), 1: _relay(m3), 2: _relay()}
    views = {0: [], 1: m3, 2: []}
    want = {3: f"equivocation: node 3 said (signed) it stopped at start-up ({WHY}; read by node 0) and signed round-0 "
               "messages (read by node 1)"}
    ts[0].alive.discard(3)  # (held in r0: startstops.hold)
    for k in (0, 1, 2):
        assert startstops.decide(ts[k], 0, reports, views) == want
        assert ts[k].alive == {0, 1, 2}
    assert ts[1].failed == ts[2].failed == {3: "eq0"} and ts[0].failed == {}


@pytest.mark.parametrize("policy", ["continue", "abort"])
def test_a_notice_with_no_round_message_of_its_signer_read_by_another_node_stops_every_node(policy):
    """Review r31h F6's shape: node 1 stopped at start-up (its notice relayed by node 0). Messages that node 3 signed
    in node 1's name, node 1's messages of another round or run, and node 1's round-0 messages in its own relay (its
    signer may show it to some nodes only) prove nothing: every node stops, naming node 1 and quoting its reason,
    once its live peers left eq0 (``end/eq0``); under abort its reason said first (a peer's server holds it)."""
    ts, keys = _swarm(policy)
    why = "node 3's ready confirmation names launch 0f62… (checked by node 1)"
    forged = [_msg(keys, 3, 1), _msg(keys, 1, 1, round_idx=1), _msg(keys, 1, 1, context="other|fp")]
    reports = {0: _relay(departed={"1": {"stop": _notice(ts[1], why)}}), 1: _relay([_msg(keys, 1, 1)]),
               2: _relay(), 3: _relay(forged)}
    views = {0: [], 1: [_msg(keys, 1, 1)], 2: [], 3: forged}
    ts[2].alive.discard(1)
    for k in (0, 3):
        ts[k].chan.set("end/eq0", b"1")  # (they left eq0: node 2 does not wait for them to read its relay)
    start = time.monotonic()
    with pytest.raises(PeerFailure) as err:
        startstops.decide(ts[2], 0, reports, views)
    assert str(err.value) == (f"node 1 stopped at start-up ({why}); node 2 stops too in exchange 'eq0', its first "
                              "round's relays (the ranks start together or not at all: node 1's signed notice read by "
                              "node 0 and no round-0 message of node 1 read by any node)")
    assert time.monotonic() - start < 5  # (timeout_s=5: linger never waited out its 12 s)
    assert (ts[0].chan.whys.get(2) == str(err.value)) is (policy == "abort")


def test_a_node_relaying_its_own_notice_or_departure_takes_itself_out_nowhere():
    """A relay counts only for what its sender read of others: node 3's own relay carrying its own notice (or leave
    mark) and its own round-0 messages decides nothing, and departures.act no longer takes it out at the nodes it
    served that relay to (it could serve it to some only: the rosters would differ, review r31n G6)."""
    ts, keys = _swarm()
    own = _relay([_msg(keys, 3, 3)], {"3": {"stop": _notice(ts[3])}})
    assert startstops.decide(ts[2], 0, {2: _relay(), 3: own}, {2: [], 3: [_msg(keys, 3, 3)]}) == {}
    departures.act(ts[2], "eq0", {3: own})
    leave = _relay(departed={"3": {"tag": "r1", "left": ts[3].signed_store.sign("left|r1|3")}})
    departures.act(ts[2], "eq1", {3: leave})
    assert ts[2].alive == {0, 1, 2, 3} and ts[2].failed == {}
    departures.act(ts[2], "eq1", {0: leave})  # (relayed by another node: out, as before)
    assert ts[2].alive == {0, 1, 2} and ts[2].failed == {3: "eq1"}


def test_the_first_round_cross_check_drops_an_equivocating_signer_s_messages_at_the_node_it_hid_them_from():
    """In-process cross-check of r31n G5 at the victim: node 0 holds node 3's notice (pushed to it alone), node 1's
    relay carries node 3's round-0 messages. Node 0 recovers them through that relay but keeps none: node 3 is
    rejected as an equivocator (peers.jsonl: ``rejected``), and node 0 goes on."""
    ts, keys = _swarm()
    ts[0].chan.told_stop("3", _notice(ts[3]))
    ts[0].alive.discard(3)  # (held in r0)
    own, m3 = [_msg(keys, 0, 0)], [_msg(keys, 3, 3)]
    ts[1].chan.set("eq0/data/1", _relay(m3))
    ts[2].chan.set("eq0/data/2", _relay())
    for k in (0, 1, 2):
        ts[k].exchanger.schedule.enter("r0")
        ts[k].exchanger.schedule.posted["r0"] = time.monotonic()
    out = ts[0].cross_check(0, own)
    assert out == own
    assert ts[0].equivocators == {3: 0} and [n for n, r in ts[0].rejected if r.startswith("equivocation")] == [3]
