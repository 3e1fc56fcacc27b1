"""One launch per owner, agreed at the check-in (review r31r R1, R2; transports/checkin.py, transports/launchproof.py).
In-process ranks on one HashStore, each in a thread; ``test_startup_split.py`` plays the same in 4-rank launches.

R1: a rank that found a quorum of equal views before it wrote its own never wrote one, so rank 3 serving its view to
node 1 alone (and answering node 1's challenges late) left nodes 0 and 2 one view short: both stopped at their
give-up, nobody named. R2: rank 3 proving a second launch nonce to node 2 (every value signed for each reader's
launch) got honest node 2 named at nodes 0 and 1 (``node 2's echo ... quotes a value of node 3 that node 3 never
signed``) and nodes 0 and 1 at node 2."""

import json
import threading
import time

import pytest

from signed_ranks import _ranks
from test_checkin_signed import _chan, _check_ins, _signed_view
from test_start_values import _run_all

from dgrpo.config import load_config
from dgrpo.errors import PeerFailure
from dgrpo.transports.checkin import check_in
from dgrpo.transports.peeraddr import launch_nonce
from dgrpo.transports.rendezvous import agree_at_start

STARTUP_S = 30.0


def test_a_view_shown_to_one_rank_alone_cannot_keep_the_others_short_of_a_quorum():
    """R1: rank 3 (no check-in of its own: its server up, its address record in the store) serves its signed view
    ``[]`` to node 1 only and refuses node 1's challenges for its first 1.5 s, so node 1 sees it checked in last
    and finds the views of nodes 0, 2 and 3 equal before it votes. On the old code node 1 left without writing its
    view, and nodes 0 and 2 (two views each) stopped at their give-up: "the ranks' views of who is absent (node 0:
    [], node 2: []) did not agree". Now node 1 writes and serves the view it decided on, and every rank goes on."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys

    store, keys = dist.HashStore(), generate_keys(4)
    three = _chan(store, 3, keys)
    view, start, serve = _signed_view(keys, 3, [], three.nonce), time.monotonic(), three.serve

    def withholding(key, reader):
        if key.startswith("hello/") and reader == "1" and time.monotonic() - start < 1.5:
            return None
        if key == "join/view":
            return view if reader == "1" else None
        return serve(key, reader)

    three.serve = withholding
    out, _, _ = _check_ins(ranks=[0, 1, 2], timeout_s=3.0, store=store, keys=keys, chans={3: three})
    assert {k: getattr(j, "absent", j) for k, j in out.items()} == {0: [], 1: [], 2: []}, out


def test_a_launch_map_proves_an_owner_two_faced_only_bound_to_the_reader_s_own_launch():
    """The decision rule (launchproof.proved/conflicts): node 2's map names launch L2 for node 3, node 0 proved L1.
    A proof is node 3's key's answer to a challenge that is the map's digest: counted only if the map holds the
    reader's own launch (else it could be replayed from an earlier start-up); a forged answer, or one for another
    map, proves nothing; an equal launch is no conflict."""
    from dgrpo.transports.launchproof import conflicts, digest, proved

    ts, keys = _ranks(4)
    for t in ts:  # (every rank proves every other's server: its launch in chan.launches)
        for k in range(4):
            t.chan.address_of(k)
    zero, three = ts[0].chan, ts[3].chan
    assert zero.launches[3] == three.nonce
    l2 = launch_nonce()
    launches = {0: zero.nonce, 1: ts[1].chan.nonce, 2: ts[2].chan.nonce, 3: l2}
    good = three.keys.hello(l2, digest(launches)).decode()

    def served(launches, proof):
        return json.dumps({"launches": {str(k): v for k, v in launches.items()}, "proofs": {"3": proof}})

    assert proved(zero, served(launches, good)) == {3: l2}
    assert conflicts(zero, 2, served(launches, good)) == [(3, three.nonce, l2, 2)]
    replay = {**launches, 0: launch_nonce()}  # (a map of another start-up: node 0's launch not in it)
    assert proved(zero, served(replay, three.keys.hello(l2, digest(replay)).decode())) == {}
    assert proved(zero, served(launches, three.keys.hello(l2, "00" * 16).decode())) == {}  # (another challenge)
    assert proved(zero, served(launches, ts[2].chan.keys.hello(l2, digest(launches)).decode())) == {}  # (not 3's key)
    same = {**launches, 3: three.nonce}
    assert conflicts(zero, 2, served(same, three.keys.hello(three.nonce, digest(same)).decode())) == []
    assert proved(zero, "junk") == {} and proved(zero, json.dumps({"launches": [], "proofs": {}})) == {}
    for t in ts:
        t.chan.close()


def _second_launch(t3, victim: str):
    """Rank 3's server proves a second launch L2 to reader ``victim`` (its challenges answered for L2, its check-in
    view, role and config value and its own entry of its config echo signed for L2), its true one to the others:
    the reviewer's ``x_twolaunch:3:2:1``. Every value is the same; only the launch it is bound to differs."""
    chan = t3.chan
    l2 = launch_nonce()
    serve = chan.serve

    def two_launches(key, reader):
        out = serve(key, reader)
        if reader != victim:
            return out
        if key.startswith("hello/"):
            return chan.keys.hello(l2, key[6:])
        if out is None:
            return None
        if key == "join/view":
            rec = json.loads(out.decode().splitlines()[-1])
            csv = ",".join(map(str, rec["absent"]))
            rec["nonce"], rec["sig"] = l2, chan.keys.sign(f"join/view|3|{csv}|{l2}")
            return (json.dumps(rec) + "\n").encode()
        if key in ("role/data/3", "config/data/3"):
            tag, val = key.split("/")[0], out.decode().partition("|")[0]
            return f"{val}|{chan.keys.sign(f'{tag}|3|{val}|{l2}')}".encode()
        if key == "config_seen/data/3":
            rec = json.loads(out)
            rec["3"] = [rec["3"][0], chan.keys.sign(f"config|3|{rec['3'][0]}|{l2}")]
            return json.dumps(rec).encode()
        return out

    chan.serve = two_launches
    return chan.keys.record(chan.address, l2)  # (its second signed address record: pushed to the victim)


def test_a_rank_proving_a_second_launch_to_one_reader_is_named_by_every_honest_rank():
    """R2 (``x_twolaunch:3:2:1``): rank 3 proves launch L2 to node 2 and L1 to nodes 0 and 1, and signs its check-in
    view, role, config value and config echo for each reader's launch. On the old code the check-in and the role
    exchange passed and every rank stopped at the config echo naming an honest rank (``node 2's echo of exchange
    'config' quotes a value of node 3 that node 3 never signed``, and at node 2 ``node 0's echo ...``). Now every
    honest rank's line names node 3 (its two launches, each answered under its key for a challenge bound to this
    start-up), directly or quoting the signed reason of a rank that stopped first; no line names an honest rank."""
    ts, _ = _ranks(4, timeout_s=STARTUP_S)
    record2 = _second_launch(ts[3], "2")
    ts[2].chan.offer("3", record2.decode())  # (pushed in rank 3's requests to node 2's server: X-Dgrpo-Addr)
    cfg = load_config(None, ["swarm.nodes=4", f"swarm.startup_timeout_s={STARTUP_S:g}"])
    store = ts[0].store.underlying_store

    def one(k):
        check_in(store, k, 4, 5.0, go_on=True, keys=ts[k].chan.keys, chan=ts[k].chan)
        return agree_at_start(ts[k], k, cfg)

    out = _run_all(ts, one)  # (each rank in its thread, an error its outcome; the channels closed)
    assert ts[2].chan.launches[3] != ts[0].chan.launches[3] == ts[1].chan.launches[3]  # (the two launches proved)
    for k in (0, 1, 2):
        assert isinstance(out[k], PeerFailure), (k, out[k])
        line = str(out[k])
        assert "node 3 answered for two launches at start-up" in line, (k, line)
        assert "echo" not in line and "never signed" not in line and "sent nothing" not in line, (k, line)


def test_a_rank_that_withholds_its_answer_to_one_reader_s_challenge_is_named_by_that_reader():
    """R2's next step: rank 3 proves its launch to node 2 once, then leaves node 2's challenge bound to its map of
    launches unanswered (so node 2 holds no fresh proof of the launch it proved, and could not show it). Node 2 stops
    after ``startup_timeout_s / 2`` naming node 3, says so signed; nodes 0 and 1, answered, pass."""
    from dgrpo.transports.launchproof import settle

    ts, _ = _ranks(4)
    three, serve, asked = ts[3].chan, ts[3].chan.serve, []

    def once(key, reader):
        if key.startswith("hello/") and reader == "2":
            asked.append(key)
            if len(asked) > 1:
                return None
        return serve(key, reader)

    three.serve = once
    out = {}
    for k in (2, 0, 1):
        try:
            settle(ts[k].chan, {0, 1, 2, 3} - {k}, 2.0)
            out[k] = None
        except PeerFailure as err:
            out[k] = str(err)
    for t in ts:
        t.chan.close()
    assert out[0] is None and out[1] is None, out
    assert out[2] == ("node 3 did not answer node 2's challenge for its launch within 1s (stalled or gone, or its server "
                      "withheld the answer from node 2): stopping before round 0"), out[2]
    assert ts[2].chan.stopped  # (said to its peers, signed)


def _two_launch_ranks():
    """Four in-process ranks after the check-in: rank 3 proved launch L2 to node 2 and L1 to nodes 0 and 1
    (:func:`_second_launch`), every rank's map of proved launches served (launchproof.Proofs)."""
    try:
        from dgrpo.transports.launchproof import Proofs
    except ImportError:  # (the code before review r31r's fix: no maps; the test then shows what it named)
        Proofs = None
    ts, _ = _ranks(4, timeout_s=STARTUP_S)
    ts[2].chan.offer("3", _second_launch(ts[3], "2").decode())
    for t in ts:
        for k in range(4):
            t.chan.address_of(k)
    for t in ts if Proofs is not None else ():
        Proofs(t.chan).refresh(time.monotonic() + 5.0)
    assert ts[2].chan.launches[3] != ts[0].chan.launches[3] == ts[1].chan.launches[3]
    return ts


def _in_threads(ts, body):
    out = {}

    def one(k):
        try:
            out[k] = body(ts[k])
        except Exception as err:  # noqa: BLE001 - the outcome under test
            out[k] = err

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(len(ts))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(STARTUP_S + 20)
    return out


def test_the_config_echo_names_the_owner_of_two_launches_not_the_rank_that_quotes_it():
    """The echo's own rule (startagree.checked_values), with no check of the maps before it: node 2 quotes node 3's
    fingerprint signed for L2, which nodes 0 and 1 cannot verify for L1. On the old code every honest rank named an
    honest one (``node 2's echo of exchange 'config' quotes a value of node 3 that node 3 never signed``); now node 2's
    map proves L2 fresh, so every honest rank names node 3."""
    ts = _two_launch_ranks()
    out = _in_threads(ts, lambda t: t.gather_values("config", "fp", timeout_s=STARTUP_S))
    for t in ts:
        t.chan.close()
    for k in (0, 1, 2):
        line = str(out[k])
        assert isinstance(out[k], PeerFailure) and "node 3 answered for two launches at start-up" in line, (k, line)
        assert "echo" not in line and "never signed" not in line, (k, line)


def test_the_roles_check_and_the_ready_check_name_the_owner_of_two_launches():
    """startready.two_faced_roles and check_ready, given node 2's start-up record or ready confirmation quoting node 3's
    role or record signed for L2: on the old code the roles check found no proof (None: the caller named node 2,
    ``nodes [2] run with another roles``) and check_ready named node 2 (``quotes a start-up record of node 3 that
    node 3 never signed``); now both name node 3 and its two launches."""
    from dgrpo.transports.startready import check_ready, ready_record, two_faced_roles

    ts = _two_launch_ranks()
    roles = {k: {str(n): ["honest", ts[n].chan.keys.sign(f"role|{n}|honest|{t.chan.launches[n]}")] for n in range(4)}
             for k, t in enumerate(ts)}
    values = {k: {"context": "run|fp", "honest": [0, 1, 2, 3], "roster": "r", "roles": roles[k]} for k in range(4)}
    store3 = ts[3].signed_store
    records = {k: {n: ts[n].signed_store.startup_record(values[n], ts[n].chan.launches[n] if n != 3 else
                                                        t.chan.launches[3]) for n in range(4)} for k, t in enumerate(ts)}
    for t in ts:
        t.signed_store.nonces = {n: store3.nonce if n == 3 else ts[n].signed_store.nonce for n in range(4)}
    found = two_faced_roles(ts[0].signed_store, values[0], {n: records[2][n] if n == 2 else records[0][n]
                                                            for n in range(4)}, ts[0].chan)
    assert found is not None and found.startswith("node 3 answered for two launches at start-up"), found
    body = {k: {**values[0], "roles": {}} for k in range(4)}
    for k, t in enumerate(ts):  # (every rank read the same values; node 2 read node 3's record for L2)
        recs = {n: ts[n].signed_store.startup_record(body[n], t.chan.launches[n]) for n in range(4)}
        t.signed_store.check_records(body[k], recs, dict(t.chan.launches))
    readies = {t.rank: ready_record(t.signed_store) for t in ts}
    for k in (0, 1):
        try:
            check_ready(ts[k].signed_store, body[k], readies, dict(ts[k].chan.launches), ts[k].chan)
            raise AssertionError("passed")
        except PeerFailure as err:
            assert str(err).startswith("node 3 answered for two launches at start-up"), (k, str(err))
    for t in ts:
        t.chan.close()


def test_an_answer_held_back_from_one_reader_is_timed_and_the_wait_ends_within_the_budget_given():
    """Review r31s S1, S2: rank 3 answers node 1's launch challenge late. ``settle`` returns when each answer came
    (node 1's caller names an answer over LATE_S late: test_start_budget), and waits no longer than the ``wait_s`` its
    caller gives (what is left of its start-up budget), naming the holder; before, it waited ``startup_timeout_s / 2``
    outside the budget and timed nothing, so the held honest rank was the one named late by its peers."""
    from dgrpo.transports.launchproof import settle

    def held_back(t3, hold_s):
        serve, until = t3.chan.serve, time.monotonic() + hold_s

        def late(key, reader):
            if key.startswith("hello/") and reader == "1" and time.monotonic() < until:
                return None
            return serve(key, reader)
        t3.chan.serve = late

    ts, _ = _ranks(4)
    held_back(ts[3], 1.5)
    came = settle(ts[1].chan, {0, 2, 3}, 20.0)
    others = settle(ts[0].chan, {1, 2, 3}, 20.0)
    for t in ts:
        t.chan.close()
    assert came[3] >= 1.5 and max(came[0], came[2]) < 1.5, came
    assert set(came) == {0, 2, 3} and max(others.values()) < 1.5, others

    ts, _ = _ranks(4)
    held_back(ts[3], 30.0)
    start = time.monotonic()
    with pytest.raises(PeerFailure) as err:
        settle(ts[1].chan, {0, 2, 3}, 20.0, 0.8)
    took = time.monotonic() - start
    for t in ts:
        t.chan.close()
    assert str(err.value).startswith("node 3 did not answer node 1's challenge for its launch within 0.8s"), err.value
    assert took < 0.8 + 4.5, took  # (not startup_timeout_s / 2 = 10 s; one read's 2 s bound and the map read past it)
