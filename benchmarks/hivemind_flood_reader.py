"""Why a record flood made hivemind rounds wait 3 s (issue 31), and that the per-key cap bounds it.

Four DHT servers and one client-mode DHT on 127.0.0.1 (node 2 reads and stores through the client, as in
``test_hivemind_attacks.py``). Each trial runs one clean round (exchange + commit of 4 small payloads), then node 3
stores 8 records of 900 kB under fresh keys and a 3 MiB one under its own in the next round's key, then that round
runs. ``--roster-less`` leaves DHT server 2 without the swarm's roster (a DHT node before its launch, or one that
never took the roster); ``--no-key-cap`` turns off the validator's per-key cap (the code before). Prints each
round's time, the stores above 1 s and every DHT find/store RPC above 0.5 s or without an answer (by peer).

    python benchmarks/hivemind_flood_reader.py --roster-less --no-key-cap --trials 3   # before
    python benchmarks/hivemind_flood_reader.py --roster-less --trials 3                # after
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hivemind.dht.protocol import DHTProtocol

from dgrpo.transports.dht.launch import _allow, allow_roster
from dgrpo.transports.dht.node import start_dht
from dgrpo.transports.dht.records import SignedRecordValidator, public_hex, record_limit, seal
from dgrpo.transports.hivemind import HivemindTransport


def _timed(name, original):
    async def call(self, peer, *args, **kwargs):
        start = time.monotonic()
        out = await original(self, peer, *args, **kwargs)
        if time.monotonic() - start > 0.5 or out is None:
            print(f"  rpc {name} {str(self.p2p.peer_id)[-6:]} -> {str(peer)[-6:]}: {time.monotonic() - start:.2f} s, "
                  f"{'no answer' if out is None else 'answered'}", flush=True)
        return out
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roster-less", action="store_true", help="DHT server 2 never takes the roster")
    ap.add_argument("--other-roster", action="store_true", help="DHT server 2 holds another swarm's roster instead "
                    "(as in test_hivemind_attacks.py, whose DHTs serve many cases)")
    ap.add_argument("--no-key-cap", action="store_true", help="no per-key cap in the validators (the code before)")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    DHTProtocol.call_find = _timed("find", DHTProtocol.call_find)  # (the DHT processes are forked after this)
    DHTProtocol.call_store = _timed("store", DHTProtocol.call_store)
    root = Path(tempfile.mkdtemp())
    cap = {"max_key_bytes": 1 << 40} if args.no_key_cap else {}

    def node(k, peers, client_mode=False):
        return start_dht(k, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=peers, identity_dir=root / f"n{k}",
                         validator=SignedRecordValidator(max_value_bytes=record_limit(4) + 64, **cap),
                         daemon_timeout_s=60, startup_timeout_s=60, client_mode=client_mode)
    first = node(0, [])
    peers = [str(a) for a in first.get_visible_maddrs()]
    dhts = [first] + [node(k, peers) for k in (1, 2, 3)] + [node(4, peers, client_mode=True)]
    if args.other_roster:
        dhts[2].run_coroutine(partial(_allow, roster={k: public_hex(Ed25519PrivateKey.generate()) for k in range(4)}))
    print("DHT peers:", {k: str(d.peer_id)[-6:] for k, d in enumerate(dhts)}, "(node 2 uses DHT 4, a client)", flush=True)
    payloads = {k: json.dumps({"messages": [], "node": k}).encode() for k in range(4)}
    slow: list[tuple[int, str, float]] = []
    store = HivemindTransport.store

    def timed_store(self, key, body, ttl_s, wait_s=10.0):
        start = time.monotonic()
        out = store(self, key, body, ttl_s, wait_s)
        if time.monotonic() - start > 1.0:
            slow.append((self.rank, key.rsplit("/", 1)[-1], round(time.monotonic() - start, 2)))
        return out
    HivemindTransport.store = timed_store
    spaces = itertools.count()

    def swarm():
        keys = [Ed25519PrivateKey.generate() for _ in range(4)]
        roster, space = {k: public_hex(keys[k]) for k in range(4)}, f"bench/{next(spaces)}-{time.time_ns()}"
        ts = [HivemindTransport(dhts[4 if k == 2 else k], k, 4, signing_key=keys[k], namespace=space,
                                honest=range(3), timeout_s=6.0, on_peer_failure="continue", max_messages=8, roster=roster)
              for k in range(4)]
        for k, d in enumerate(dhts):  # every DHT node of a swarm takes its roster at launch (but a roster-less one)
            if not ((args.roster_less or args.other_roster) and k == 2):
                d.run_coroutine(partial(_allow, roster=roster))
        for t in ts:
            t.close = lambda wait=True: None  # (the DHTs serve every trial)
            allow_roster(t)
            t.run_id, t.fingerprint = "run", "fp"
        return ts

    def round_of(ts):
        out = [None] * 4

        def body(i):
            try:
                out[i] = sorted(ts[i].commit(0, ts[i].exchange("r0", payloads[i])))
            except Exception as err:  # noqa: BLE001 - reported
                out[i] = repr(err)
        threads = [threading.Thread(target=body, args=(i,)) for i in range(4)]
        start = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return out, time.monotonic() - start

    for trial in range(args.trials):
        slow.clear()
        print(f"trial {trial}: clean round", flush=True)
        out, clean = round_of(swarm())
        ts = swarm()
        key, attacker = ts[3].key("r0"), ts[3]
        stored = [attacker.dht.store(key, value, time.time() + 60, subkey=subkey) for subkey, value in
                  [seal(Ed25519PrivateKey.generate(), key, 3, b"x" * 900_000) for _ in range(8)]
                  + [seal(attacker._key, key, 3, b"DGRPO1ffffffff" * (3 * 2**20 // 14))]]
        print(f"trial {trial}: flood stored by some DHT node: {sum(stored)} of 9; attacked round", flush=True)
        got, attacked = round_of(ts)
        print(f"trial {trial}: clean {clean:.2f} s, attacked {attacked:.2f} s; honest sets {got[:3]}; "
              f"stores over 1 s (node, tag, s): {slow}; load {os.getloadavg()[0]:.1f}", flush=True)
    for d in dhts:
        d.shutdown()


if __name__ == "__main__":
    main()
