"""Records of an earlier launch, stored again within the expiry their node signed (issue 31, the hivemind leftovers of
review r31i F4/F6): on real DHT nodes in this process (one thread per node). A reader ignores a heard record of
another process than its relayer's hello, and a joiner a launch record signed before it started; neither names its
signer. The multi-process run: test_hivemind.py::test_an_earlier_launchs_records_stored_again_neither_split_nor_stop_
a_launch_and_its_joiner."""

import hashlib
import json
import threading
import time

import pytest

pytest.importorskip("hivemind")

from hivemind.utils import get_dht_time  # noqa: E402
from hivemind_helpers import in_threads  # noqa: E402
from test_hivemind_transport import dhts, transports  # noqa: E402,F401 (the module's DHT nodes, fresh key spaces)

from dgrpo.transports.dht.hellos import HelloBook  # noqa: E402
from dgrpo.transports.dht.launch import start_launch  # noqa: E402
from dgrpo.transports.dht.records import HEADER_BYTES, public_hex, seal  # noqa: E402


def test_a_heard_record_of_an_earlier_launch_stored_again_is_ignored_and_the_launch_is_agreed(dhts, monkeypatch):
    """Node 1's heard record of an earlier process (signed 10 s ago, expiring in 30 s: within its signed lifetime) is
    in the DHT before the launch; node 1 alone read a newer hello of node 3 (a fresh process: it proves nothing, the
    newest is every node's choice), and stores its current heard record 2 s after the others began reading. Before,
    nodes 0 and 2 took the old heard record as node 1's relay, never read the current one, and chose node 3's older
    hello where nodes 1 and 3 chose the newer: two launch ids, and every node stopped at the ``start`` barrier
    (node 1 named silent by nodes 0 and 2). Now the old record (another process than node 1's hello) is ignored and
    the current one waited for: one launch id, made of node 3's newer hello, and nobody named."""
    from dgrpo.transports.dht import launch as dl

    ts = transports(dhts, 4, launched=False)
    heard_key, hello_key, then = f"{ts[0].namespace}/heard", f"{ts[0].namespace}/hello", round(get_dht_time() - 10, 3)
    old_hello = json.dumps({"process": "a" * 16, "nonce": "a" * 16, "config": "fp", "t": then}).encode()
    old_sig = seal(ts[0].signed.signing_key, hello_key, 0, old_hello, then + 30)[1][:64].hex()
    stale = json.dumps({"process": "b" * 16, "hellos": [[0, public_hex(ts[0].signed.signing_key),
                                                         old_hello.decode("latin-1"), old_sig]]}).encode()
    subkey, value = seal(ts[1].signed.signing_key, heard_key, 1, stale, then + 40)  # (as node 1's earlier process did)
    assert ts[3].dht.store(heard_key, value, then + 40, subkey=subkey)  # node 3 stores it again, its expiry unchanged
    newer = json.dumps({"process": "c" * 16, "nonce": "c" * 16, "config": "fp", "t": round(get_dht_time() + 1, 3)})
    newer_sig = seal(ts[3].signed.signing_key, hello_key, 3, newer.encode(), get_dht_time() + 30)[1][:64].hex()
    original, nonces = dl.hear, {}

    def hear(t, book, pubs, own, startup_timeout_s):
        nonces[t.rank] = own.says["nonce"]
        if t.rank == 1:  # (node 3 showed its newer hello to node 1 alone; node 1 relays it 2 s late)
            book.add(3, pubs[3], newer.encode(), newer_sig, 1)
            time.sleep(2.0)
        if t.rank == 3:  # (node 3 relays as the process of its newer hello, as the one who signed it would)
            book.quote = lambda pubs, process: HelloBook.quote(book, pubs, "c" * 16)
        return original(t, book, pubs, own, startup_timeout_s)
    monkeypatch.setattr(dl, "hear", hear)
    out, seconds = in_threads([lambda t=t: start_launch(t, "fp", 10) for t in ts])
    assert out == [None] * 4, out
    nonces[3] = "c" * 16  # (node 3's hello every node takes: the newer one node 1 relayed)
    agreed = sorted([k, public_hex(ts[k].signed.signing_key), nonces[k]] for k in range(4))
    assert [t.run_id for t in ts] == [hashlib.sha256(json.dumps(agreed).encode()).hexdigest()[:16]] * 4
    assert all(t.rejected == [] for t in ts), [t.rejected for t in ts]  # nobody named, node 1 least of all
    assert seconds < 10  # (no barrier ran out)


def test_a_heard_record_of_an_earlier_launch_that_expires_later_does_not_keep_the_current_one_out(dhts):
    """Review r31j F6: node 1's heard record of an earlier process, signed 10 s ago with the longest life a record may
    have (``MAX_TTL_S``, as an earlier launch's config could give it), is stored again by node 3 with exactly its
    signed expiry (a valid copy) before the launch. The DHT keeps, per subkey, the copy that expires last: before,
    the heard record lived ``startup_timeout_s + 30`` s, the DHT refused node 1's current one, and every node stopped
    (node 1 "no DHT node took its heard record", the others "node 1 sent nothing for exchange 'heard'"). Now every
    launch's heard record lives ``SHARED_TTL_S``, so the current one, signed later, expires later and replaces it:
    one launch id, and nobody named."""
    from dgrpo.transports.dht.records import MAX_TTL_S

    ts = transports(dhts, 4, launched=False)
    key, then = f"{ts[0].namespace}/heard", round(get_dht_time() - 10, 3)
    stale = json.dumps({"process": "b" * 16, "hellos": []}).encode()
    subkey, value = seal(ts[1].signed.signing_key, key, 1, stale, then + MAX_TTL_S)
    assert ts[3].dht.store(key, value, then + MAX_TTL_S, subkey=subkey)  # (a valid copy: its signed expiry)
    out, seconds = in_threads([lambda t=t: start_launch(t, "fp", 10) for t in ts])
    assert out == [None] * 4, out
    assert len({t.run_id for t in ts}) == 1 and ts[0].run_id
    assert all(t.rejected == [] for t in ts), [t.rejected for t in ts]
    assert seconds < 10  # (no wait ran out)
    found = ts[0].dht.get(key, latest=True).value[subkey]  # (the current record took the old copy's subkey)
    assert found.value != value and json.loads(found.value[HEADER_BYTES:])["process"] != "b" * 16


def test_launch_records_of_an_earlier_launch_that_expire_later_do_not_keep_a_joiners_quorum_out(dhts):
    """Review r31j F6 for launch records: nodes 1's and 2's launch records of an earlier launch (``eeee…``, signed 10 s
    ago with the longest life a record may have), stored again with their signed expiry before the swarm publishes.
    Before, a launch record lived ``3 × timeout_s + 60`` s: the DHT refused nodes 1's and 2's current records, the
    joiner ignored the old ones (signed before it started) and stopped after ``startup_timeout_s`` without a quorum
    (and its peers named it ``missing payload``). Now launch records live ``SHARED_TTL_S``: the joiner enters the
    swarm's launch at its round and nobody is named."""
    from dgrpo.transports.dht.joining import join_launch
    from dgrpo.transports.dht.launch import publish_launch
    from dgrpo.transports.dht.records import MAX_TTL_S

    ts = transports(dhts, 4)
    joiner = ts[3]
    joiner.join, joiner.first_round, joiner.fixed_roster, joiner.signed.run_id = {3: 1}, 1, True, ""
    key, then = f"{ts[0].namespace}/launch", round(get_dht_time() - 10, 3)
    for k in (1, 2):
        body = {"run": "e" * 16, "roster": {str(n): p for n, p in sorted(ts[0].roster.items())}, "config": "fp",
                "alive": [0, 1, 2], "round": 5, "agreed": {}, "t": then}
        subkey, value = seal(ts[k].signed.signing_key, key, k, json.dumps(body).encode(), then + MAX_TTL_S)
        assert ts[0].dht.store(key, value, then + MAX_TTL_S, subkey=subkey)
    for t in ts[:3]:
        t.agreed, t.alive = {"name": "run-a"}, {0, 1, 2}
    out = []

    def join():
        try:
            out.append(join_launch(joiner, "fp", 10))
        except Exception as err:  # noqa: BLE001 - shown by the assert below
            out.append(err)
    thread = threading.Thread(target=join)
    thread.start()
    time.sleep(0.5)
    for t in ts[:3]:
        assert publish_launch(t, 0) is None
    thread.join(20)
    assert out == [None], out
    assert joiner.run_id == "run" and joiner.alive == {0, 1, 2, 3} and joiner.agreed == {"name": "run-a"}
    assert joiner.rejected == [] and all(t.rejected == [] for t in ts[:3]), [t.rejected for t in ts]
