"""Feasibility figures of the hivemind transport on 127.0.0.1: import, daemon start-up, store, get, exchange.

    python benchmarks/hivemind_dht.py --nodes 4 --reps 50 --payload-kb 10 --out benchmarks/results/hivemind_dht.json

Measures, in this process (each DHT node runs in its own forked process with its own p2pd):

* ``import_s``: ``python -c "import hivemind"`` in a fresh interpreter (3 runs);
* ``start_first_s`` / ``start_join_s``: a DHT node without bootstrap peers, and one bootstrapping to it
  (``dgrpo.transports.dht.node.start_dht``, which is what each dgrpo node runs at launch), ``--starts`` of each;
* ``store_s``: storing one signed record of ``--payload-kb`` kB under a key (Ed25519 signing included);
* ``get_s``: one ``get(latest=True)`` of a key holding ``--nodes`` such records, plus verifying them;
* ``exchange_s``: a whole message exchange of the transport between ``--nodes`` nodes (post, read
  until every peer's record is in, and the commit step's view exchange), one thread per node.

Medians and 90th percentiles over ``--reps``; prints one JSON line (``--out`` writes it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median": round(statistics.median(xs), 5), "p90": round(xs[int(0.9 * (len(xs) - 1))], 5), "n": len(xs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--payload-kb", type=float, default=10.0)
    parser.add_argument("--out")
    args = parser.parse_args()

    imports = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import hivemind"], check=True)
        imports.append(time.perf_counter() - t0)

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from dgrpo.transports.dht.node import start_dht
    from dgrpo.transports.dht.records import SignedRecordValidator, public_hex
    from dgrpo.transports.hivemind import HivemindTransport

    root = Path(tempfile.mkdtemp(prefix="dgrpo-hivemind-bench-"))

    def start(k, peers):
        return start_dht(k, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=peers,
                         identity_dir=root / f"n{k}", validator=SignedRecordValidator(), daemon_timeout_s=120,
                         startup_timeout_s=120)

    first_s, join_s = [], []
    for i in range(args.starts):  # interleaved: a first node, then one that bootstraps to it
        t0 = time.perf_counter()
        a = start(100 + 2 * i, [])
        first_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = start(101 + 2 * i, [str(m) for m in a.get_visible_maddrs()])
        join_s.append(time.perf_counter() - t0)
        b.shutdown()
        a.shutdown()

    dhts = [start(0, [])]
    peers = [str(m) for m in dhts[0].get_visible_maddrs()]
    dhts += [start(k, peers) for k in range(1, args.nodes)]
    keys = [Ed25519PrivateKey.generate() for _ in dhts]
    ts = [HivemindTransport(d, k, args.nodes, signing_key=keys[k], namespace="dgrpo/bench", honest=range(args.nodes),
                            timeout_s=60) for k, d in enumerate(dhts)]
    for t in ts:
        t.run_id, t._closed = "bench", True
        t.roster = {k: public_hex(keys[k]) for k in range(args.nodes)}
    body = b"x" * int(args.payload_kb * 1024)
    store_s, get_s, exchange_s = [], [], []
    for rep in range(args.reps):
        key = ts[0].key(f"s{rep}")
        for t in ts:
            t0 = time.perf_counter()
            assert t.store(key, body, 600)
            store_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        got = ts[rep % args.nodes].read(key, set(range(args.nodes)))
        get_s.append(time.perf_counter() - t0)
        assert len(got) == args.nodes, got.keys()
    for rep in range(args.reps):
        spent = [0.0] * args.nodes

        def one(t, rep=rep, spent=spent):
            t0 = time.perf_counter()
            t.commit(rep, t.exchange(f"r{rep}", body))
            spent[t.rank] = time.perf_counter() - t0
        threads = [threading.Thread(target=one, args=(t,)) for t in ts]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        exchange_s.append(max(spent))
    for d in dhts:
        d.shutdown()
    shutil.rmtree(root, ignore_errors=True)
    out = {"nodes": args.nodes, "payload_kb": args.payload_kb, "import_s": summary(imports),
           "start_first_s": summary(first_s), "start_join_s": summary(join_s), "store_s": summary(store_s),
           "get_s": summary(get_s), "exchange_s": summary(exchange_s),
           "note": "127.0.0.1, one machine with 2 CPU cores shared with other jobs; hivemind 1.1.12"}
    line = json.dumps(out)
    print(line)
    if args.out:
        Path(args.out).write_text(line + "\n")


if __name__ == "__main__":
    main()
