"""What a flood of pushed headers costs an honest rank's server (issue 31 point 3, review h31r2 item e).

Node 0's server (:class:`~dgrpo.transports.peerserve.PeerChannel` with roster keys and its read acknowledgements
checked by a :class:`~dgrpo.transports.signedstore.SignedStore` armed as after the start-up check; a process of its
own) serves a round payload of ``--payload-kib`` KiB. Node 3 (``--attackers`` processes, ``--conns`` connections
each, one selector loop) sends requests as fast as the server answers them, each pushing every header a peer can push
(``X-Dgrpo-Why``, ``-Stop``, ``-Addr``, ``-Ack`` on a key read by acknowledgement), with a fresh junk signature each
(no cache answers it), for ``--seconds``, from ``--sources`` loopback addresses. Node 1 (this process) reads the
payload as ``collect`` does (one fetch, a 2 s budget) every 50 ms, first with no flood (``quiet``) then during it
(``flood``), and node 2 pushes its signed stop reason during the flood (``push``: until its server answers that it
kept it). ``--challenges``: node 3's requests ask for challenge answers instead (``GET /v/hello/{fresh}``, no pushed
header: each answer is node 0's Ed25519 signature), node 2 challenges node 0's address during the flood
(``challenge``: until an answer verifies), and the server counts its signatures by thread (task h31m).

Run it against any source tree (before/after: the same command, PYTHONPATH=<tree>/src):

    PYTHONPATH=src nice -n 15 python benchmarks/push_flood.py [--attackers 2 | --conns 256 --sources 4] [--challenges]
    (the committed runs: BENCHMARKS.md, "Pushed headers flooded at an honest rank's server")

Prints JSON lines: per phase {"phase", "reads", "missed", "p50_s", "p99_s", "max_s"}; {"phase": "push", "seconds",
"kept", "tries_s"} (``--challenges``: {"phase": "challenge", "seconds", "proved", "tries_s"}); the server's counts
{"phase": "server", "flood_requests", "verifications": {thread name: count}, "signatures": {thread name: count}, ...}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import selectors
import socket
import subprocess
import sys
import time

CONTEXT = "run|fp"
NONCES = {n: f"{n + 1:032x}" for n in range(4)}  # each node's launch nonce for its bound signatures


def _keys():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return {n: Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"push_flood%d" % n).digest()) for n in range(4)}


def server(payload_kib: int) -> None:
    """Node 0's server, until stdin closes; then its counts as one JSON line."""
    import threading

    from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer
    from dgrpo.transports.peeraddr import AddressKeys
    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.signedstore import SignedStore, Wait

    keys = _keys()
    roster, counts, signs = Roster.of(keys), {}, {}

    class Counting:  # (a roster whose public keys count their verifications by thread)
        def __init__(self, inner):
            self.inner, self.keys = inner, inner.keys

        def public(self, node):
            pub = self.inner.public(node)

            class Pub:
                def verify(self, sig, data):
                    name = threading.current_thread().name
                    counts[name] = counts.get(name, 0) + 1
                    return pub.verify(sig, data)

            return None if pub is None else Pub()

    class Signing:  # (its private key: counts its signatures by thread)
        def __init__(self, inner):
            self.inner = inner

        def sign(self, data):
            name = threading.current_thread().name
            signs[name] = signs.get(name, 0) + 1
            return self.inner.sign(data)

    chan = PeerChannel(0, host="127.0.0.1", keys=AddressKeys(0, keys[0], roster, "fp"))
    chan.keys.roster, chan.keys.key = Counting(roster), Signing(keys[0])
    acks = SignedStore(None, 0, set(range(4)), Wait(5.0))
    acks.signer, acks.keys = Signer(0, keys[0], CONTEXT), SignatureVerifier(Counting(roster), CONTEXT)
    acks.nonce, acks.nonces = NONCES[0], dict(NONCES)
    chan.acks = acks
    chan.launches[3] = NONCES[3]  # (node 3's server proved: its stop notices are checked)
    chan.set("r0/data/0", os.urandom(payload_kib << 10))
    chan.set("why", b"node 0's own reason\n")  # (a key whose reads count by acknowledgement)
    print(chan.address, chan.nonce, flush=True)
    sys.stdin.read()
    srv, checks = chan.server, getattr(chan, "checks", None)
    print(json.dumps({"phase": "server", "verifications": counts, "signatures": signs, "evicted": srv.evicted, "refused": srv.refused,
                      "idle": srv.idle, "slow": srv.slow,
                      "dropped": None if checks is None else sum(checks.dropped.values()),
                      "checked": None if checks is None else checks.checked}), flush=True)


def attacker(address: str, conns: int, seconds: float, sources: int = 1, challenges: bool = False,
             claim: str = "3", spread: int = 0) -> None:
    """Node 3: ``conns`` connections at once, each a request pushing every header (``challenges``: asking for a
    challenge answer), then the next; prints how many were answered. ``sources`` > 1: the connections come from that many loopback addresses in turn (127.0.0.2, …),
    past the server's 64 connections per source address (a peer with several addresses: 256 open at most).
    ``claim``: the reader its challenges claim to be; ``spread`` > 0: every other challenge claims one of ``spread``
    other names instead (100, 101, …: each a queue of its own at the server; review r31m F1)."""
    import secrets

    host, port = address.rsplit(":", 1)
    sel, done, end, i, j = selectors.DefaultSelector(), 0, time.monotonic() + seconds, 0, 0

    def request() -> bytes:
        nonlocal i
        i += 1
        if challenges:
            name = str(100 + i % spread) if spread and i % 2 == 0 else claim
            return f"GET /v/hello/{secrets.token_hex(16)} HTTP/1.1\r\nHost: x\r\nX-Dgrpo-Reader: {name}\r\n\r\n".encode()
        sig = secrets.token_hex(64)
        heads = {"X-Dgrpo-Reader": "3", "X-Dgrpo-Why": json.dumps({"why": f"junk {i}", "sig": sig}),
                 "X-Dgrpo-Stop": json.dumps({"why": f"junk {i}", "nonce": NONCES[3], "sig": sig}),
                 "X-Dgrpo-Addr": json.dumps({"addr": "127.0.0.1:9", "nonce": f"{time.time_ns():016x}{i:016x}",
                                             "sig": sig}),
                 "X-Dgrpo-Ack": secrets.token_hex(64)}
        return ("GET /v/why HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in heads.items())
                + "\r\n").encode()

    def start() -> None:
        nonlocal j
        s, j = socket.socket(), j + 1
        if sources > 1:
            s.bind((f"127.0.0.{2 + j % sources}", 0))
        s.setblocking(False)
        s.connect_ex((host, int(port)))
        sel.register(s, selectors.EVENT_WRITE, [request(), b""])

    for _ in range(conns):
        start()
    while time.monotonic() < end:
        for key, ev in sel.select(0.1):
            s, state = key.fileobj, key.data
            try:
                if ev & selectors.EVENT_WRITE:
                    s.sendall(state[0])
                    sel.modify(s, selectors.EVENT_READ, state)
                    continue
                chunk = s.recv(65536)
            except OSError:
                chunk = b""
            if chunk:
                state[1] += chunk
                continue
            done += state[1].startswith(b"HTTP/1.1 200")
            sel.unregister(s)
            s.close()
            start()
    print(done, flush=True)


def _reads(reader, seconds: float) -> list[float | None]:
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        value, _ = reader.fetch(0, "r0/data/0", 1 << 24, t0 + 2.0, 2.0)
        out.append(None if value is None else time.monotonic() - t0)
        time.sleep(0.05)
    return out


def _summary(phase: str, times: list[float | None]) -> dict:
    got = sorted(t for t in times if t is not None)
    q = (lambda p: round(got[min(len(got) - 1, int(p * len(got)))], 5)) if got else (lambda p: None)
    return {"phase": phase, "reads": len(times), "missed": len(times) - len(got), "p50_s": q(0.5), "p99_s": q(0.99),
            "max_s": round(got[-1], 5) if got else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--payload-kib", type=int, default=416)  # (about a round payload's byte cap, BENCHMARKS.md)
    ap.add_argument("--attackers", type=int, default=1)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--sources", type=int, default=1)
    ap.add_argument("--challenges", action="store_true", help="flood challenge requests, not pushed headers")
    ap.add_argument("--claim", default="3", help="the reader node 3's challenges claim (2: node 2's name)")
    ap.add_argument("--spread", type=int, default=0, help="every other challenge claims one of this many names")
    ap.add_argument("--pace", type=float, default=0.0, help="seconds node 2 waits between its tries (settle: 0.2)")
    ap.add_argument("--role", default="main", help=argparse.SUPPRESS)
    ap.add_argument("--address", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "server":
        return server(a.payload_kib)
    if a.role == "attacker":
        return attacker(a.address, a.conns, a.seconds, a.sources, a.challenges, a.claim, a.spread)
    from dgrpo.swarm.identity import Signer
    from dgrpo.transports.peerserve import PeerChannel

    me = [sys.executable, __file__]
    srv = subprocess.Popen([*me, "--role", "server", "--payload-kib", str(a.payload_kib)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    address, nonce = srv.stdout.readline().split()
    reader, pusher = PeerChannel(1, host="127.0.0.1"), PeerChannel(2, host="127.0.0.1")
    reader.addrs[0] = pusher.addrs[0] = address
    print(json.dumps(_summary("quiet", _reads(reader, 3.0))), flush=True)
    flood = [subprocess.Popen([*me, "--role", "attacker", "--address", address, "--conns", str(a.conns), "--seconds",
                               str(a.seconds), "--sources", str(a.sources), "--claim", a.claim, "--spread",
                               str(a.spread), *(["--challenges"] if a.challenges else [])],
                              stdout=subprocess.PIPE, text=True)
             for _ in range(a.attackers)]
    time.sleep(1.0)
    times = _reads(reader, a.seconds - 4.0)
    if a.challenges:
        return _challenge(a, srv, flood, times, address, nonce, reader, pusher)
    why = "node 1 sent nothing"
    line = json.dumps({"why": why, "sig": Signer(2, _keys()[2], CONTEXT).sign_bytes(
        f"dgrpo/why|2|{why}|{CONTEXT}|{NONCES[2]}".encode())})
    t0, kept, tries = time.monotonic(), False, []
    while not kept and time.monotonic() < t0 + 2.0:
        t1 = time.monotonic()
        kept = pusher.fetch(0, "why/2", 4096, t0 + 2.0, 2.0, extra={"X-Dgrpo-Why": line})[0] == why.encode()
        tries.append(round(time.monotonic() - t1, 5))
    push_s = time.monotonic() - t0
    answered = sum(int(p.communicate(timeout=a.seconds + 30)[0] or 0) for p in flood)
    print(json.dumps(_summary("flood", times)), flush=True)
    print(json.dumps({"phase": "push", "seconds": round(push_s, 5), "kept": kept, "tries_s": tries}), flush=True)
    srv.stdin.close()
    counts = json.loads(srv.stdout.readline())
    srv.wait(10)
    print(json.dumps({**counts, "flood_requests": answered, "flood_s": a.seconds, "attackers": a.attackers,
                      "conns": a.conns, "sources": a.sources, "payload_kib": a.payload_kib,
                      "load": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    reader.close()
    pusher.close()


def _challenge(a, srv, flood, times, address, nonce, reader, pusher) -> None:
    """``--challenges``: node 2 challenges node 0's address during the flood (as a peer resolving it does: again while
    unanswered, 2 s at most each), then the counts."""
    from dgrpo.swarm.identity import Roster
    from dgrpo.transports.peeraddr import AddressKeys, answers

    keys = _keys()
    mine = AddressKeys(2, keys[2], Roster.of(keys), "fp")
    t0, proved, tries = time.monotonic(), None, []
    while proved is None and time.monotonic() < t0 + 10.0:
        t1 = time.monotonic()
        proved = answers(mine, 0, address, nonce, 2)
        tries.append(round(time.monotonic() - t1, 5))
        if proved is None:
            time.sleep(a.pace)
    took = time.monotonic() - t0
    answered = sum(int(p.communicate(timeout=a.seconds + 30)[0] or 0) for p in flood)
    print(json.dumps(_summary("flood", times)), flush=True)
    print(json.dumps({"phase": "challenge", "seconds": round(took, 5), "proved": proved, "tries": len(tries),
                      "tries_s": tries[-50:], "flood_left_s": round(a.seconds - 1.0 - max(0.0, a.seconds - 4.0), 3)}),
          flush=True)
    srv.stdin.close()
    counts = json.loads(srv.stdout.readline())
    srv.wait(10)
    print(json.dumps({**counts, "flood_requests": answered, "flood_s": a.seconds, "attackers": a.attackers,
                      "conns": a.conns, "sources": a.sources, "payload_kib": a.payload_kib, "challenges": True,
                      "load": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    reader.close()
    pusher.close()


if __name__ == "__main__":
    main()
