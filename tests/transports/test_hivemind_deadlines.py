"""Issue 31, must-have 4, on the hivemind transport: every wait of a round ends within ``swarm.timeout_s`` of the
round's start, whatever node 3 (the attacker, one of 4) withholds, and the one who made the others wait is named.

Real DHT nodes in this process (:mod:`hivemind_swarm`), one thread per swarm node. Before, a round waited for the
payloads ``timeout_s`` after the post, then for the views and the echo until 2 and 3 × ``timeout_s`` after the
commit started: a node that withheld its echo made every honest round last about 4 × ``timeout_s``.
"""

import json
import time

import pytest

pytest.importorskip("hivemind")

from hivemind_helpers import in_threads  # noqa: E402
from hivemind_swarm import (PAYLOADS, POLL_S, SLACK_S, TIMEOUT_S, dht_nodes, named, seen_by, swarm, view_of,  # noqa: E402
                            viewing)

from dgrpo.transports.dht.rounds import RoundClock, message_round  # noqa: E402
from dgrpo.types import Message  # noqa: E402

MESSAGES = {k: Message(k, 0, "p", k, f"text {k}", (1, 2), 7, "tok") for k in range(4)}


@pytest.fixture(scope="module")
def dhts(tmp_path_factory):
    """This module's DHT (:func:`hivemind_swarm.dht_nodes`), shared by its cases."""
    yield from dht_nodes(tmp_path_factory.mktemp("dht"))


def timed_round(t):
    """Node ``t``'s round 0 (its message of :data:`MESSAGES`): (what all_gather returned or raised, seconds it took)."""
    start = time.monotonic()
    try:
        out = t.all_gather({t.rank: [MESSAGES[t.rank]]})
    except Exception as err:  # noqa: BLE001 - the test inspects it
        out = err
    return out, time.monotonic() - start


def withholding(t, tags):
    """From now on ``t`` stores nothing under exchanges ``tags`` (and otherwise runs its round as it is)."""
    post = t.post
    t.post = lambda tag, payload, deadline=None: None if tag in tags else post(tag, payload, deadline)


# withheld → (the exchange node 3 is failed in, the phase that ends then in quarters of timeout_s, its payload kept,
#             how node 3 is named)
CASES = {"nothing (silent)": ("r0", 1, False, "missing payload: it sent nothing for exchange 'r0' within 1.5s of the "
                                             "round (1/4 of swarm.timeout_s=6s)"),
         "its payload": ("r0", 1, False, "missing payload: it sent nothing for exchange 'r0' within 1.5s"),
         "its view": ("v0", 2, True, "missing view: it sent no view of exchange 'r0' within 3s of the round (2/4 of "
                                     "swarm.timeout_s=6s)"),
         "its echo": ("e0", 3, True, "missing echo: it sent no echo of exchange 'r0' within 4.5s of the round (3/4 of "
                                     "swarm.timeout_s=6s)")}


@pytest.mark.slow
@pytest.mark.parametrize("withheld", list(CASES))
def test_a_node_withholding_its_payload_view_or_echo_cannot_stretch_a_round_past_the_timeout(dhts, withheld):
    """Each honest node's round, timed from its own start, ends by the end of the phase node 3 withheld (a quarter of
    ``timeout_s`` per phase) + SLACK_S, and within ``timeout_s`` + POLL_S; the honest nodes keep the messages of a
    clean round (node 3's too when its payload was out before it fell silent), none is failed, and node 3 is named."""
    clean = swarm(dhts)
    out, _ = in_threads([lambda t=t: timed_round(t) for t in clean])
    assert [got for got, _ in out] == [list(MESSAGES.values())] * 4, out
    failed_in, quarters, kept, reason = CASES[withheld]
    ts = swarm(dhts)
    withholding(ts[3], {"nothing (silent)": {"r0", "v0", "e0"}, "its payload": {"r0"}, "its view": {"v0"},
                        "its echo": {"e0"}}[withheld])
    rounds = [lambda t=t: timed_round(t) for t in ts[:3]]
    out, _ = in_threads(rounds if withheld == "nothing (silent)" else rounds + [lambda: timed_round(ts[3])])
    want = [MESSAGES[k] for k in range(4) if k < 3 or kept]
    for t, (got, seconds) in zip(ts[:3], out[:3]):
        print(f"node 3 withholds {withheld}: node {t.rank}'s round took {seconds:.2f} s (timeout_s={TIMEOUT_S:g})")
        assert got == want, (t.rank, got)
        assert t.alive == {0, 1, 2} and t.failed == {3: failed_in}, (t.rank, t.alive, t.failed)
        assert named(t, 3, reason), t.rejected
        assert not [r for s, r in t.rejected if s in (0, 1, 2)], t.rejected
        assert seconds < min(quarters * TIMEOUT_S / 4 + SLACK_S, TIMEOUT_S + POLL_S)


def test_a_late_honest_node_within_a_quarter_of_the_timeout_and_a_malicious_view_cannot_split_the_honest_nodes(dhts):
    """The guaranteed case of the commit (docs/hivemind.md, Trust): honest nodes whose rounds start less than
    ``timeout_s``/4 apart keep the same payloads whatever one malicious node does. Here ``timeout_s`` = 8 s: node 2
    starts its round 1 s after the others, and its reads miss node 0's payload (a slow link). Node 3 posts its view,
    which leaves node 0 out, 4.5 s after the round's start: after nodes 0-1's views phase ended (4 s) and before node
    2's (5 s), so only node 2 reads it, and its echo is the only way nodes 0-1 learn of it (by their echo's end, 6 s:
    node 2 relays it at about 4.5 s). Node 0's payload is listed by node 1 and missed by nodes 2 and 3: every honest
    node decides on the same views and drops it, and node 0 leaves, as a late node does; nodes 1 and 2 keep the same
    payloads, each within ``timeout_s`` of its own start."""
    from dgrpo.errors import PeerFailure

    ts = swarm(dhts, timeout_s=8.0)
    attacker, direct = ts[3], {}
    seen_by(ts[2], 0, "r0")
    for t in ts[:3]:  # (which views each honest node read itself, before any echo)
        def recording(tag, payload, *a, t=t, exchange=t.exchange, **k):
            got = exchange(tag, payload, *a, **k)
            direct.setdefault(t.rank, set()).update(got if tag == "v0" else ())
            return got
        t.exchange = recording

    def honest(t, delay=0.0):
        time.sleep(delay)
        start = time.monotonic()
        try:
            out = message_round(t, 0, PAYLOADS[t.rank])
        except PeerFailure as err:
            out = err
        return out, time.monotonic() - start

    def malicious():
        clock = RoundClock.now(attacker.timeout_s)
        got = attacker.exchange("r0", PAYLOADS[3], deadline=clock.end("payloads"))
        viewing(attacker, json.dumps(view_of(attacker, drop=[0])).encode())
        time.sleep(max(0.0, clock.start + 4.5 - time.monotonic()))
        return attacker.commit(0, got, clock)
    out, _ = in_threads([lambda: honest(ts[0]), lambda: honest(ts[1]), lambda: honest(ts[2], 1.0), malicious])
    assert 3 not in direct[0] and 3 not in direct[1] and 3 in direct[2], direct  # (the case as staged)
    assert isinstance(out[0][0], PeerFailure) and "declared failed by its peers" in str(out[0][0]), out[0]
    for t, (got, seconds) in zip(ts[1:3], out[1:3]):
        print(f"late honest node 2 and a malicious view: node {t.rank}'s round took {seconds:.2f} s (timeout_s=8)")
        assert got == {k: PAYLOADS[k] for k in (1, 2, 3)}, (t.rank, got)
        assert t.alive == {1, 2, 3} and t.failed == {0: "r0"}, (t.rank, t.alive, t.failed)
        assert seconds < 8.0 + POLL_S


def test_a_record_one_dht_node_refuses_is_reported_stored_once_the_others_took_it(dhts):
    """The 1-5 s stalls of client-mode rounds: hivemind 1.1.12's ``store`` answers with the status of the replica that
    answered last, so where one DHT node refuses a swarm's records (here DHT 2, which holds another swarm's roster) a
    store the other replicas took often read as failed, and ``post`` retried it every 0.5 s until its deadline. Now a
    store reported failed is read back: every store of a client-mode node and of a server is reported stored, at once."""
    from hivemind.utils import get_dht_time

    from dgrpo.transports.dht.records import seal

    swarm(dhts)  # (DHT 2 takes this swarm's roster: from now on it refuses the records of the next one)
    ts = swarm(dhts, client_2=True)
    raw, ours, slowest = [], [], 0.0
    for t in (ts[2], ts[0]):  # through the client-mode DHT node, and through a server
        for i in range(20):
            key = t.signed.key(f"raw{i}")
            subkey, value = seal(t.signed.signing_key, key, t.rank, b"x", exp := get_dht_time() + 60)
            raw.append(t.dht.store(key, value, exp, subkey=subkey))
            start = time.monotonic()
            ours.append(bool(t.signed.store(t.signed.key(f"ours{i}"), b"x", 60)))
            slowest = max(slowest, time.monotonic() - start)
    print(f"stores reported failed: hivemind {raw.count(False)} of 40, dgrpo {ours.count(False)} of 40; "
          f"slowest dgrpo store {slowest:.2f} s")
    assert False in raw  # (the cause; 16 of 40 when measured)
    assert ours == [True] * 40 and slowest < 1.0


@pytest.mark.slow
def test_a_view_timed_between_the_honest_views_marks_cannot_skew_the_next_round_and_drop_an_honest_node(dhts):
    """Review r31e G3: node 2 starts each round S = 1.5 s after nodes 0-1 (``timeout_s`` = 12 s: under its quarter,
    the guaranteed case). Node 3 posts its payload on time, its view T/2 + S/2 after its round's start (after nodes
    0-1's views phase ended, before node 2's) and never its echo. Before, nodes 0-1 declared it failed and did not
    wait for its echo while node 2, which read its view, did, to its own 3/4 mark: node 2 began round 1 over 3 s after
    the others (2.4 s in the review's 8 s), was missed and dropped, and node 3 went unnamed. Now every honest node waits
    for the echo of a node whose payload a view lists, so each ends round 0 at its own 3/4 mark: over two rounds
    nobody honest is dropped, the honest nodes keep the same payloads, node 3 is named (``missing echo``; ``late
    view`` where its view came through an echo)."""
    spread, timeout_s = 1.5, 12.0  # (the review's 0.9 s of 8 s, with more room on each side of the view's timing)
    ts = swarm(dhts, timeout_s=timeout_s)
    attacker, direct = ts[3], {}
    for t in ts[:3]:  # (which nodes' views each honest node read itself, before any echo)
        def recording(tag, payload, *a, t=t, exchange=t.exchange, **k):
            got = exchange(tag, payload, *a, **k)
            direct.setdefault((t.rank, tag), set()).update(got if tag.startswith("v") else ())
            return got
        t.exchange = recording
    post, started = attacker.post, {}

    def timing(tag, payload, deadline=None):
        if tag[0] == "e":
            return None  # never its echo
        if tag[0] == "v":
            time.sleep(max(0.0, started[tag[1:]] + timeout_s / 2 + spread / 2 - time.monotonic()))
        return post(tag, payload, deadline)
    attacker.post = timing
    t0 = time.monotonic() + 0.5

    def rounds(t, delay):
        time.sleep(max(0.0, t0 + delay - time.monotonic()))
        out = []
        for r in (0, 1):
            start = time.monotonic()
            if t is attacker:
                started[str(r)] = start  # (its views' timing counts from its own start)
            try:
                out.append((start - t0, sorted(message_round(t, r, PAYLOADS[t.rank])), time.monotonic() - start))
            except Exception as err:  # noqa: BLE001 - the test inspects it
                out.append((start - t0, err, time.monotonic() - start))
                break
        return out
    out, _ = in_threads([lambda t=t, d=d: rounds(t, d) for t, d in zip(ts, (0.0, 0.0, spread, 0.0))])
    assert 3 not in direct[0, "v0"] and 3 not in direct[1, "v0"] and 3 in direct[2, "v0"], (direct, out)  # (as staged)
    for t, res in zip(ts[:3], out[:3]):
        print(f"G3: node {t.rank}: " + " | ".join(f"round {r}: start {s:.2f} kept {k} took {d:.2f} s"
                                                   for r, (s, k, d) in enumerate(res)))
        assert [k for _, k, _ in res] == [[0, 1, 2, 3], [0, 1, 2]], (t.rank, res)
        assert all(d < timeout_s + POLL_S for _, _, d in res), (t.rank, res)
        assert t.alive == {0, 1, 2} and t.failed == {3: "e0"}, (t.rank, t.alive, t.failed)
        assert named(t, 3, f"missing echo: it sent no echo of exchange 'r0' within {timeout_s * 3 / 4:g}s"), t.rejected
        assert bool(named(t, 3, "late view: its view of exchange 'r0'")) == (t.rank != 2), t.rejected
        assert not [r for s, r in t.rejected if s in (0, 1, 2)], t.rejected
    starts = [res[1][0] for res in out[:3]]
    assert max(starts) - min(starts) < spread + 0.5 < timeout_s / 4, starts  # (round 0's spread, not grown)


class Stalling:
    """Node ``t``'s DHT through a proxy that times every wait this node's records put on a DHT call (``waits``: when
    the wait began, ``time.monotonic()``, and its limit in seconds); once :meth:`arm` is called, its gets of ``keys``
    never answer (a DHT node holding them that stalls: each waits out its limit, then times out)."""

    def __init__(self, dht, keys):
        self.dht, self.keys, self.armed, self.waits = dht, set(keys), False, []

    def arm(self):
        self.armed = True

    def _timed(self, future, stalled=False):
        waits = self.waits

        class Timed:
            def result(self, timeout=None):
                waits.append((time.monotonic(), timeout))
                if stalled:
                    time.sleep(timeout)
                    raise TimeoutError("stalled")
                return future.result(timeout=timeout)
        return Timed()

    def get(self, key, *a, **k):
        return self._timed(self.dht.get(key, *a, **k), stalled=self.armed and key in self.keys)

    def store(self, *a, **k):
        return self._timed(self.dht.store(*a, **k))


def test_no_wait_of_a_round_that_reads_a_payload_again_to_its_end_passes_the_timeout(dhts):
    """The longest round: node 2 misses node 3's payload (a slow link) and, from its commit on, its DHT answers none
    of its reads of that payload nor of its peers' relays (each read waits out its limit). Nodes 0, 1 and 3 list the
    payload, so node 2 reads it again until the round's last phase ends, then leaves (it cannot keep what its peers
    keep). No wait of node 2's round passes ``timeout_s`` after its start: the last phase ends ``TAIL_S`` (0.5 s)
    before it, so its last read of the payload and of the relays, 0.2 s each at least, end by then, and every limit a
    DHT call got ends by the round's stop (before, the phase ended at 4/4 and the relays' read got 0.2 s past it:
    the round took ``timeout_s`` + 0.2 s here, and up to + 0.4 s with the local calls). The round ends within
    ``timeout_s`` + POLL_S; the others keep every payload, node 2 relayed to them nothing it lacked."""
    from dgrpo.errors import PeerFailure
    from dgrpo.transports.dht.rounds import TAIL_S

    ts = swarm(dhts)
    victim = ts[2]
    seen_by(victim, 3, "r0")
    stall = victim.signed.dht = Stalling(victim.dht, {victim.signed.key("r0"), victim.signed.key("r0x3")})
    commit = victim.commit
    victim.commit = lambda *a, **k: (stall.arm(), commit(*a, **k))[1]
    starts = {}

    def round_of(t):
        starts[t.rank] = time.monotonic()  # (all_gather's clock starts right after)
        return timed_round(t)
    out, _ = in_threads([lambda t=t: round_of(t) for t in ts])
    err, seconds = out[2]
    print(f"a read again that never answers: node 2's round took {seconds:.3f} s (timeout_s={TIMEOUT_S:g}: "
          f"{seconds - TIMEOUT_S:+.3f} s); its last DHT wait's limit ended "
          f"{max(b + w for b, w in stall.waits) - starts[2]:.3f} s after its start ({len(stall.waits)} waits)")
    assert isinstance(err, PeerFailure) and "could not read node 3's payload of exchange 'r0'" in str(err), err
    for t, (got, _) in zip(ts[:2], out[:2]):
        assert got == list(MESSAGES.values()), (t.rank, got)
    start = starts[2]
    stop = start + TIMEOUT_S
    late = [(round(b - start, 3), round(w, 3)) for b, w in stall.waits if b + w > stop + 0.005]
    assert not late, late  # no limit runs past the stop (5 ms: from this start to all_gather's clock)
    stalled_end = max(b + w for b, w in stall.waits)
    assert stop - TAIL_S < stalled_end <= stop + 0.005, (stalled_end - start)  # (the last phase ran to its end)
    assert TIMEOUT_S - TAIL_S < seconds < TIMEOUT_S + POLL_S, seconds
