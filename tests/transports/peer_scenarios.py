"""Attacks a rank plays with its own server (peerserve), and what each rank trained on (issue 31, review r31b).

``serve:R:MODE`` (:func:`serve_attack`): rank R's server is ``slow`` (answers its round data a byte every
0.5 s), ``huge`` (says it holds 1 GiB), ``junk`` (random bytes for its payloads, relays and accusations).
:func:`record_views` writes each rank's message sets, so a test compares every honest rank, not only the main one.
"""

from __future__ import annotations

import json
from pathlib import Path


def record_views(path: str) -> None:
    """Write, per all-gather, the messages this rank's transport hands its swarm (after the relays' merge):
    one JSON list of [node, index, sha256 of the message's JSON without its signature (fresh keys each
    run)] a line (views)."""
    import hashlib

    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.all_gather

    def all_gather(self, local):
        out = original(self, local)
        rows = sorted([m.node, m.index, hashlib.sha256(json.dumps(
            {k: v for k, v in m.to_dict().items() if k != "signature"}, sort_keys=True).encode()).hexdigest()]
                      for m in out)
        with open(path, "a") as f:
            f.write(json.dumps(rows) + "\n")
        return out

    DistributedTransport.all_gather = all_gather


def views(log_dir, ranks) -> list[list]:
    """Per rank of ``ranks``, its per-round message sets as :func:`record_views` wrote them."""
    return [[json.loads(line) for line in Path(log_dir, f"trained{r}.jsonl").read_text().splitlines()] for r in ranks]




def serve_attack(mode: str) -> None:
    """This rank's own server misbehaves from the first round on (it reads its peers as an honest node does).

    ``slow``: its round payloads, relays and accusations trickle out a byte every 0.5 s; ``huge``: an endless
    stream (no length given) in their place; ``junk``: 4 kB of random bytes in their place.
    """
    import os
    import time

    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.post

    def trickle():
        while True:
            yield b"{"
            time.sleep(0.5)

    def endless():
        while True:
            yield b" " * (1 << 20)

    def hook(key, reader):
        if not (key.startswith(("r", "eq", "accuse")) and key[:2] != "ro"):
            return None  # start-up values (role, roster) are served honestly: a start-up DoS is out of scope here
        return {"slow": trickle, "huge": endless}.get(mode, lambda: os.urandom(4096))()

    def post(self, tag, payload, framed=False):
        self.chan.hook = hook
        return original(self, tag, payload, framed)

    DistributedTransport.post = post


def address_attack(victim: str, seconds: str = "3") -> None:
    """``addr:R:V``: once node V published its server address record in the store, this rank writes over it
    every 10 ms for ``seconds``: a record for node V pointing at this rank's own server, signed with this
    rank's roster key (the run needs ``swarm.protocol.roster``)."""
    import threading
    import time

    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        keys, key = self.chan.keys, f"addr/{victim}"
        forged = json.dumps({"addr": self.chan.address,
                             "sig": keys.key.sign(keys._text(int(victim), self.chan.address)).hex()}).encode()

        def attack():
            while not self.store.check([key]):
                time.sleep(0.005)
            print(f"rank {self.rank}: overwrote {key}", flush=True)
            end = time.monotonic() + float(seconds)
            while time.monotonic() < end:
                self.store.set(key, forged)
                time.sleep(0.01)

        threading.Thread(target=attack, daemon=True).start()

    DistributedTransport.__init__ = init


def connection_flood(victim: str, seconds: str = "15") -> None:
    """``connflood:R:V``: from its first round on, this rank opens connections to node V's server as fast as it
    can for ``seconds`` (non-blocking connects, nothing sent, the last 5000 held), while it plays its part
    honestly otherwise."""
    import socket
    import threading
    import time

    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.post

    def flood(host: str, port: int):
        held, end = [], time.monotonic() + float(seconds)
        print(f"rank flooding node {victim}'s server at {host}:{port}", flush=True)
        while time.monotonic() < end:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, port))
            held.append(s)
            if len(held) > 5000:
                held.pop(0).close()
            if len(held) % 50 == 0:
                time.sleep(0.005)  # (leaves this rank's own round some CPU)

    def post(self, tag, payload, framed=False):
        if tag == "r0" and not getattr(self, "_flooding", False):
            self._flooding = True
            host, _, port = self.chan.address_of(int(victim)).rpartition(":")
            threading.Thread(target=flood, args=(host, int(port)), daemon=True).start()
        return original(self, tag, payload, framed)

    DistributedTransport.post = post
