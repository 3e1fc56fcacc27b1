"""Attacks a rank plays with its own server (peerserve), and what each rank trained on (issue 31, review r31b).

``serve:R:MODE`` (:func:`serve_attack`): rank R's server is ``slow`` (answers its round data a byte every
0.5 s), ``huge`` (says it holds 1 GiB), ``junk`` (random bytes for its payloads, relays and accusations), ``head``
/ ``rechead`` (trickles the head of its answers for those / for its round records, without end).
:func:`record_views` writes each rank's message sets, so a test compares every honest rank, not only the main one.
"""

from __future__ import annotations

import json
from pathlib import Path


def record_views(path: str) -> None:
    """Write, per all-gather, the messages this rank's transport hands its swarm (after the relays' merge):
    one JSON list of [node, index, sha256 of the message's JSON without its signature and context (fresh keys
    and a fresh launch id each run)] a line (views)."""
    import hashlib

    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.all_gather

    def all_gather(self, local):
        out = original(self, local)
        rows = sorted([m.node, m.index, hashlib.sha256(json.dumps(
            {k: v for k, v in m.to_dict().items() if k not in ("signature", "context")}, sort_keys=True).encode()).hexdigest()]
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
    stream (no length given) in their place; ``junk``: 4 kB of random bytes in their place; ``head``: the head of
    each answer (status line, then a header that never ends) trickles out a byte every 0.5 s, without end
    (:func:`_trickle_heads`; review r31h F1); ``rechead``: the same for its round records ``rec{r}`` only (F2).
    """
    import os
    import time

    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.post
    if mode in ("head", "rechead"):
        _trickle_heads()

    def trickle():
        while True:
            yield b"{"
            time.sleep(0.5)

    def endless():
        while True:
            yield b" " * (1 << 20)

    def hook(key, reader):
        if not key.startswith(("r", "eq", "accuse")) or key.startswith(("ro", "ready")):
            return None  # start-up values (role, roster, ready) are served honestly: a start-up DoS is out of scope here
        if mode == "rechead":
            return HEAD if key.startswith("rec") else None
        return {"slow": trickle, "huge": endless, "head": lambda: HEAD}.get(mode, lambda: os.urandom(4096))()

    def post(self, tag, payload, framed=False):
        self.chan.hook = hook
        return original(self, tag, payload, framed)

    DistributedTransport.post = post


HEAD = object()  # what serve_attack's hook returns for an answer whose head trickles (_trickle_heads)


def _trickle_heads() -> None:
    """This rank's server answers a key its hook maps to :data:`HEAD` with ``HTTP/1.1 200 OK``, then a header
    one byte every 0.5 s that never ends (each byte well inside a reader's 1 s per-recv timeout), from a thread of
    its own, until the reader goes away (review r31h F1: ``http.client`` read such a head for ever)."""
    import threading
    import time

    from dgrpo.transports.peerhttp import BoundedServer

    answer = BoundedServer._answer

    def drip(sock):
        try:
            sock.setblocking(True)
            sock.sendall(b"HTTP/1.1 200 OK\r\n")
            while True:
                sock.sendall(b"X")
                time.sleep(0.5)
        except OSError:  # (the reader closed it)
            pass
        finally:
            sock.close()

    def _answer(self, conn, status, body):
        if body is not HEAD:
            return answer(self, conn, status, body)
        held = conn.sock.dup()
        self._end(conn)
        threading.Thread(target=drip, args=(held,), daemon=True).start()
        return None

    BoundedServer._answer = _answer


def address_attack(victim: str, seconds: str = "6") -> None:
    """``addr:R:V``: from the moment it joined the store (before the check-in, so before anyone reads an address)
    this rank waits for node V's server address record and then writes over it every 10 ms for ``seconds``:
    a record for node V pointing at a dead port, signed with this rank's roster key (the run needs
    ``swarm.protocol.roster``)."""
    import threading
    import time

    import dgrpo.transports.distributed as D
    from dgrpo.transports.rendezvous import address_keys

    join = D.join_group

    def join_group(cfg):
        res = join(cfg)
        import torch.distributed as dist

        store, keys, key = dist.PrefixStore("dgrpo", res[0]), address_keys(cfg, res[1]), f"addr/{victim}"
        forged = json.dumps({"addr": "127.0.0.1:9", "sig": keys.key.sign(keys._text(int(victim), "127.0.0.1:9|")).hex()})

        def attack():
            while not store.check([key]):
                time.sleep(0.002)
            print(f"rank {res[1]}: overwrote {key}", flush=True)
            end = time.monotonic() + float(seconds)
            while time.monotonic() < end:
                store.set(key, forged.encode())
                time.sleep(0.01)

        threading.Thread(target=attack, daemon=True).start()
        return res

    D.join_group = join_group


def address_rekey(victim: str, seconds: str = "6") -> None:
    """``rekey:R:V`` (no roster file: the keys travel in the address records): from before its own check-in this
    rank waits for node V's address record and then writes over it every 10 ms for ``seconds``: V's address and
    launch nonce with another public key, the record signed by that key (a public key replaced after its owner
    wrote it; its server is still V's, which cannot answer for the other key)."""
    import threading
    import time

    from dgrpo.transports import rendezvous
    from dgrpo.transports.peerserve import AddressKeys

    check_in = rendezvous.check_in

    def attacked(store, rank, world, *args, **kwargs):
        import torch.distributed as dist

        prefixed, key = dist.PrefixStore("dgrpo", store), f"addr/{victim}"
        bound = kwargs["keys"].bound

        def attack():
            while not prefixed.check([key]):
                time.sleep(0.002)
            real = json.loads(prefixed.get(key))
            other = AddressKeys.fresh(int(victim), bound, world)
            forged = other.record(real["addr"], real["nonce"])
            print(f"rank {rank}: overwrote {key} with another public key", flush=True)
            end = time.monotonic() + float(seconds)
            while time.monotonic() < end:
                prefixed.set(key, forged)
                time.sleep(0.01)

        threading.Thread(target=attack, daemon=True).start()
        return check_in(store, rank, world, *args, **kwargs)

    rendezvous.check_in = attacked


def address_replay(victim: str, seconds: str = "40") -> None:
    """``addrreplay:R:V``: review r31c F3. From the moment it joined the store, this rank writes over node V's
    address record every millisecond for ``seconds``: a record node V's key signed in an earlier launch (its
    server gone; played here by signing with V's key from the test's key folder, as rank R kept it then)."""
    import threading
    import time

    import dgrpo.transports.distributed as D
    from dgrpo.swarm.identity import Roster, key_path, load_private_key
    from dgrpo.transports.fingerprint import config_fingerprint
    from dgrpo.transports.peerserve import AddressKeys

    join = D.join_group

    def join_group(cfg):  # (before the check-in, which now needs every rank's server address)
        import os

        import torch.distributed as dist

        pc, v = cfg.swarm.protocol, int(victim)
        old = AddressKeys(v, load_private_key(key_path(pc.key_dir, v)), Roster.load(pc.roster),
                          config_fingerprint(cfg)).record("127.0.0.1:9", "ab" * 16)
        store = dist.PrefixStore("dgrpo", dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                                        is_master=False))

        def attack():
            while not store.check([f"addr/{v}"]):
                time.sleep(0.001)
            print(f"rank {os.environ['RANK']}: writing node {v}'s record of an earlier launch over addr/{v}", flush=True)
            end = time.monotonic() + float(seconds)
            while time.monotonic() < end:
                store.set(f"addr/{v}", old)
                time.sleep(0.001)

        threading.Thread(target=attack, daemon=True).start()
        return join(cfg)

    D.join_group = join_group


def connection_flood(victim: str, seconds: str = "15", push: str = "") -> None:
    """``connflood:R:V[:SECONDS[:push]]``: from its first round on, this rank opens connections to node V's server as
    fast as it can for ``seconds`` (non-blocking connects, nothing sent, the last 5000 held), while it plays its part
    honestly otherwise; ``push``: 24 more threads send node V's server requests pushing junk stop reasons and notices
    in its own name (a fresh signature each: review h31r2 item e), as fast as it answers them."""
    import http.client
    import os
    import secrets
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

    def pushes(host: str, port: int, nonce: str):
        end = time.monotonic() + float(seconds)
        while time.monotonic() < end:
            sig, conn = secrets.token_hex(64), http.client.HTTPConnection(host, port, timeout=5)
            try:
                conn.request("GET", "/v/why", headers={"X-Dgrpo-Reader": os.environ["RANK"], "X-Dgrpo-Why": json.dumps(
                    {"why": "junk", "sig": sig}), "X-Dgrpo-Stop": json.dumps({"why": "j", "nonce": nonce, "sig": sig})})
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)
            finally:
                conn.close()

    def post(self, tag, payload, framed=False):
        if tag == "r0" and not getattr(self, "_flooding", False):
            self._flooding = True
            host, _, port = self.chan.address_of(int(victim)).rpartition(":")
            threading.Thread(target=flood, args=(host, int(port)), daemon=True).start()
            for _ in range(24 if push else 0):
                threading.Thread(target=pushes, args=(host, int(port), self.chan.nonce), daemon=True).start()
        return original(self, tag, payload, framed)

    DistributedTransport.post = post


def startup_junk(victim: str, wipe: str = "") -> None:
    """``startjunk:R:V[:wipe]``: this rank's server serves junk as its start-up record to node V only (the others
    get its genuine one), so node V's start-up check fails alone while the others pass (issue 31: before, node V
    never bound the launch, its leave marks verified for nobody, and its peers waited out timeout_s and called
    it silent). ``wipe``: from then on this rank also deletes node V's stop notice from the store every
    millisecond for 30 s."""
    import os
    import threading
    import time

    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.check_startup

    def wiper():
        import torch.distributed as dist

        store = dist.PrefixStore("dgrpo", dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                                        is_master=False))
        end, deleted = time.monotonic() + 30, 0
        while time.monotonic() < end:
            deleted += bool(store.delete_key(f"stop/{victim}"))
            if deleted == 1:
                print(f"rank {os.environ['RANK']}: deleted stop/{victim}", flush=True)
                deleted += 1
            time.sleep(0.001)

    def check_startup(self, protocol, timeout_s):
        key = f"startup/data/{self.rank}"
        self.chan.hook = lambda k, reader: b'{"values": {}, "nonce": "junk"}' if k == key and reader == victim else None
        if wipe:
            threading.Thread(target=wiper, daemon=True).start()
        return original(self, protocol, timeout_s)

    DistributedTransport.check_startup = check_startup


def address_cycle(victim: str, seconds: str = "20") -> None:
    """``addrcycle:R:V``: from the moment it joined the store, this rank writes a record of node V of an earlier
    launch over addr/V and pushes 40 more (dead ports, dated 1-2 minutes back, signed with V's key from the test's
    key folder, as rank R kept them then) in node V's name to every other rank's server, over and over for
    ``seconds`` (issue 31: a reader kept the 16 latest pushed records of an owner, so 16 old ones cycled the
    owner's own out)."""
    import http.client
    import os
    import secrets
    import threading
    import time

    import dgrpo.transports.distributed as D
    from dgrpo.swarm.identity import Roster, key_path, load_private_key
    from dgrpo.transports.fingerprint import config_fingerprint
    from dgrpo.transports.peerserve import AddressKeys

    join = D.join_group

    def push(addr: str, rec: str) -> None:
        host, _, port = addr.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=1.0)
        try:
            conn.request("GET", "/v/x", headers={"X-Dgrpo-Reader": victim, "X-Dgrpo-Addr": rec})
            conn.getresponse().read()
        except OSError:
            pass
        finally:
            conn.close()

    def join_group(cfg):
        import torch.distributed as dist

        pc, v, me, world = cfg.swarm.protocol, int(victim), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        keys = AddressKeys(v, load_private_key(key_path(pc.key_dir, v)), Roster.load(pc.roster), config_fingerprint(cfg))
        old = [keys.record(f"127.0.0.1:{9 + i}", f"{time.time_ns() - (60 + i) * 10**9:016x}{secrets.token_hex(8)}").decode()
               for i in range(41)]
        store = dist.PrefixStore("dgrpo", dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                                        is_master=False))

        def attack():
            end, said = time.monotonic() + float(seconds), False
            while time.monotonic() < end:
                store.set(f"addr/{v}", old[0].encode())
                for k in sorted(set(range(world)) - {v, me}):
                    if store.check([f"addr/{k}"]):
                        addr = json.loads(store.get(f"addr/{k}"))["addr"]
                        for rec in old[1:]:
                            push(addr, rec)
                        if not said:
                            print(f"rank {me}: pushing 40 old records of node {v} to node {k}'s server", flush=True)
                            said = True
                time.sleep(0.001)

        threading.Thread(target=attack, daemon=True).start()
        return join(cfg)

    D.join_group = join_group
