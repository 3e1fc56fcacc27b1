"""Records of an earlier launch, stored again within the expiry their node signed (issue 31, the hivemind leftovers of
review r31i F4/F6): on real DHT nodes in this process (one thread per node). A reader ignores a heard record of
another process than its relayer's hello, and a joiner a launch record signed before it started; neither names its
signer. The multi-process run: test_hivemind.py::test_an_earlier_launchs_records_stored_again_neither_split_nor_stop_
a_launch_and_its_joiner."""

import hashlib
import json
import time

import pytest

pytest.importorskip("hivemind")

from hivemind.utils import get_dht_time  # noqa: E402
from hivemind_helpers import in_threads  # noqa: E402
from test_hivemind_transport import dhts, transports  # noqa: E402,F401 (the module's DHT nodes, fresh key spaces)

from dgrpo.transports.dht.hellos import HelloBook  # noqa: E402
from dgrpo.transports.dht.launch import start_launch  # noqa: E402
from dgrpo.transports.dht.records import public_hex, seal  # noqa: E402


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
