"""Launch a real hivemind swarm for tests: one forked process per node on 127.0.0.1, and its scenarios.

Node 0 listens on a fixed free port with an identity made here, so its full address (peer id
included) is known before any process starts; the other nodes bootstrap from it and retry until it
is up. Processes are forked from the test process, as in ``distributed_helpers.launch`` (torch,
transformers and hivemind are already imported, so a node starts in well under a second).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from distributed_helpers import RankResult, apply_scenario, free_port


def node0_address(out_dir: Path, port: int) -> str:
    """Make node 0's libp2p identity where it will look for it; return its bootstrap address."""
    from hivemind.p2p import P2P, PeerID

    identity = out_dir / ".hivemind" / "node0" / "p2p.key"
    identity.parent.mkdir(parents=True, exist_ok=True)
    if not identity.exists():
        P2P.generate_identity(str(identity))
    return f"/ip4/127.0.0.1/tcp/{port}/p2p/{PeerID.from_identity(identity.read_bytes()).to_base58()}"


def _node(node: int, args: list[str], log_path: str, scenario: str) -> None:
    """Body of a forked node: the CLI with its output in ``log_path``."""
    import logging

    os.environ.update({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    logging.root.handlers.clear()  # pytest's capture handlers came along with the fork
    if scenario.startswith("forge:"):
        forge(scenario, node)
    elif scenario.startswith("replay:"):
        replay(scenario, node, args)
    elif scenario.startswith("omit:"):
        omit(scenario, node)
    elif scenario.startswith("rehello:"):
        rehello(scenario, node)
    elif scenario.startswith("launchlie:"):
        launchlie(scenario, node)
    elif scenario.startswith("pinlaunch:"):
        pinlaunch(scenario, node)
    elif scenario.startswith("stale:"):
        stale(scenario, node, args)
    else:
        apply_scenario(scenario, node, args)  # die:R:ROUND, stall:R:ROUND:SECONDS
    from dgrpo.cli import main

    code = main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch(nprocs: int, args: list[str], out_dir: Path, scenario: str = "", timeout: float = 150,
           per_node: dict[int, list[str]] | None = None,
           late: dict[int, Callable[[], list[str]]] | None = None) -> list[RankResult]:
    """Run ``dgrpo <args>`` as ``nprocs`` hivemind nodes; return each node's exit code and output.

    ``per_node[k]`` adds overrides for node k; ``late[k]`` is called (here, after the other nodes
    started) and returns node k's whole command line, which starts once it returns.
    """
    import multiprocessing

    port = free_port()
    address = node0_address(out_dir, port)
    ctx = multiprocessing.get_context("fork")
    procs, logs, start = {}, {}, time.monotonic()

    def spawn(node, command):
        where = [f"swarm.hivemind.listen=[/ip4/127.0.0.1/tcp/{port}]"] if node == 0 else \
            ["swarm.hivemind.listen=[/ip4/127.0.0.1/tcp/0]", f"swarm.hivemind.initial_peers=[{address}]"]
        node_args = [*command, "swarm.transport=hivemind", f"swarm.hivemind.node={node}", *where,
                     "swarm.unsafe_key_exchange=true",  # loopback, no roster file: fresh keys exchanged at start
                     *(per_node or {}).get(node, [])]
        logs[node] = str(out_dir / f"node{node}.log")
        procs[node] = ctx.Process(target=_node, args=(node, node_args, logs[node], scenario))  # not daemonic: it forks its DHT
        procs[node].start()

    for node in range(nprocs):
        if node not in (late or {}):
            spawn(node, args)
    for node, command in (late or {}).items():
        spawn(node, command())
    results = []
    try:
        for node in range(nprocs):
            p = procs[node]
            p.join(max(1.0, timeout - (time.monotonic() - start)))
            code = p.exitcode if p.exitcode is not None else -9
            results.append(RankResult(node, code, Path(logs[node]).read_text(), time.monotonic() - start))
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join()
    return results


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.2)


def forge(scenario: str, node: int) -> None:
    """``forge:R:V``: node R, after posting each round's messages, writes two forged records for node V:
    one under V's own subkey signed with R's key (every DHT node refuses it), one under a subkey that
    claims V's slot with R's own key (a valid signature, but not the roster's pair: every DHT node refuses it
    since issue 31, and so would every receiver).
    The forged payload is R's messages relabelled as V's."""
    _, who, victim = scenario.split(":")
    if int(who) != node:
        return
    victim = int(victim)
    from hivemind.utils import get_dht_time
    from hivemind.utils.serializer import MSGPackSerializer

    from dgrpo.transports import hivemind as ht
    from dgrpo.transports.dht.records import _signed_bytes, key_id, seal, subkey_for

    original = ht.HivemindTransport.post

    def post(self, tag, payload, *when):
        original(self, tag, payload, *when)
        if not tag.startswith("r") or not tag[1:].isdigit():
            return
        data = json.loads(payload)
        for m in data["messages"]:
            m["node"] = victim
        body, key = json.dumps(data).encode(), self.signed.key(tag)
        theirs = subkey_for(victim, self.roster[victim])
        sig = self.signed.signing_key.sign(_signed_bytes(key_id(key), MSGPackSerializer.dumps(theirs), body))
        ok_theirs = self.dht.store(key, sig + body, get_dht_time() + 60, subkey=theirs)
        mine, value = seal(self.signed.signing_key, key, victim, body, exp := get_dht_time() + 60)
        ok_mine = self.dht.store(key, value, exp, subkey=mine)
        print(f"forger {node}: {tag}: under node {victim}'s subkey stored={ok_theirs}; "
              f"under its own key for node {victim}'s slot stored={ok_mine}", flush=True)

    ht.HivemindTransport.post = post


def replay(scenario: str, node: int, args: list[str]) -> None:
    """``replay:R:OF``: in every message round node R waits (up to 20 s) for its peers' records, reads their signed
    messages and adds to its own payload (issue 31): ``respelled``, each with its signature in upper case;
    ``copies``, each three times; ``other_round``, the previous round's messages as they were signed;
    ``other_run``, each as its signer signed it for another run under the same roster key (the test's key folder
    holds every node's key: a real attacker would have recorded them in that run)."""
    _, who, of = scenario.split(":")
    if int(who) != node:
        return
    from dgrpo.transports import hivemind as ht

    original, last = ht.HivemindTransport.post, []

    def post(self, tag, payload, *when):
        if not (tag.startswith("r") and tag[1:].isdigit()):
            return original(self, tag, payload, *when)
        others, deadline = (self.alive - {self.rank}), time.monotonic() + 20
        got = {}
        while others - got.keys() and time.monotonic() < deadline:
            got.update({n: rec[1] for n, rec in self.signed.read(self.signed.key(tag), others).items()})
            time.sleep(0.2)
        current = [m for n in sorted(got) for m in json.loads(got[n])["messages"]]
        if of == "other_run":
            from dgrpo.swarm.identity import Signer, key_path, load_private_key
            from dgrpo.swarm.validation import parse_message

            key_dir = next(a.split("=", 1)[1] for a in args if a.startswith("swarm.protocol.key_dir="))
            msgs = [parse_message(m)[0] for m in current]
            extra = [Signer(m.node, load_private_key(key_path(key_dir, m.node)), "another-run|fp").sign(m).to_dict()
                     for m in msgs if m is not None]
        else:
            extra = {"respelled": [{**m, "signature": m["signature"].upper()} for m in current],
                     "copies": current * 3, "other_round": list(last)}[of]
        last[:] = current
        data = json.loads(payload)
        data["messages"] += extra
        data["labels"] = data.get("labels", []) + ["honest"] * len(extra)
        print(f"replayer {node}: {tag}: {len(extra)} {of} messages added", flush=True)
        return original(self, tag, json.dumps(data).encode(), *when)

    ht.HivemindTransport.post = post


def omit(scenario: str, node: int) -> None:
    """``omit:R:V``: node R's commit view of every message round leaves node V out (a lone accusation: before issue
    31, every node dropped V's messages and V left the swarm)."""
    _, who, victim = scenario.split(":")
    if int(who) != node:
        return
    from dgrpo.transports import hivemind as ht

    original = ht.HivemindTransport.exchange

    def exchange(self, tag, payload, *args, **kwargs):
        if tag.startswith("v") and tag[1:].isdigit():
            view = json.loads(payload)
            view.pop(victim, None)
            payload = json.dumps(view).encode()
            print(f"accuser {node}: {tag}: node {victim} left out of its view", flush=True)
        return original(self, tag, payload, *args, **kwargs)

    ht.HivemindTransport.exchange = exchange


def rehello(scenario: str, node: int) -> None:
    """``rehello:R``: node R runs the honest code, but from its first hello on a thread stores its signed hello again
    every 0.1 s with a fresh nonce, all else the same (review r31g J6: peers that left their hello loop at different
    moments hashed different nonces into the launch id, and the start barrier named honest nodes). ``rehello:R:process``:
    each also under a fresh process id, dated now (issue 31: a flood that proved nothing filled the 64 hellos kept per
    key, and the honest nodes kept different ones)."""
    if int(scenario.split(":")[1]) != node:
        return
    fresh = scenario.endswith(":process")
    import secrets

    from hivemind.utils import get_dht_time

    from dgrpo.transports.dht import launch as dl

    original = dl.Hello.refresh

    def refresh(self):
        original(self)
        if getattr(self, "_rehello", False):
            return
        self._rehello = True

        def again():
            for n in itertools.count():
                hello = {**json.loads(self.body), "nonce": secrets.token_hex(8)}
                if fresh:
                    hello.update(process=secrets.token_hex(8), t=round(get_dht_time(), 3))
                self.t.signed.store(self.key, json.dumps(hello).encode(), 30)
                if n == 0:
                    print(f"rehello {node}: storing its hello again every 0.1 s with a fresh nonce"
                          + (" and process id" if fresh else ""), flush=True)
                time.sleep(0.1)
        threading.Thread(target=again, daemon=True).start()

    dl.Hello.refresh = refresh


def launchlie(scenario: str, node: int) -> None:
    """``launchlie:R:LIE``: node R runs the honest code but signs a lying launch record each time it publishes one
    (review r31h F11): ``round``, the swarm at round 10**6; ``run``, another launch id (``f`` × 16) at its last round
    + 1; ``name``, the agreed run name ``/tmp/evil``. Before, a joiner took the record with the highest round of any
    one node: it stopped, or trained alone."""
    _, who, lie = scenario.split(":")
    if int(who) != node:
        return
    from hivemind.utils import get_dht_time

    from dgrpo.transports.dht import launch as dl

    def publish(t, round_idx=None, wait_s=10.0):
        last = round_idx if round_idx is not None else (t.last_round if t.last_round is not None else -1)
        body = {"run": "f" * 16 if lie == "run" else t.run_id, "roster": {str(n): p for n, p in sorted(t.roster.items())},
                "config": t.fingerprint, "alive": sorted(t.alive), "round": 10**6 if lie == "round" else last + 1,
                "agreed": {**t.agreed, "name": "/tmp/evil"} if lie == "name" else t.agreed, "t": round(get_dht_time(), 3)}
        print(f"launch liar {node}: launch record of launch {body['run']} at round {body['round']}", flush=True)
        t.signed.store(f"{t.namespace}/launch", json.dumps(body).encode(), t.retention_s, wait_s)

    dl.publish_launch = publish


def pinlaunch(scenario: str, node: int) -> None:
    """``pinlaunch:R:V1/V2``: node R publishes its own honest launch records, and at each publish from round 0 on
    stores the victims' own signed launch records (as it read them at its first publish of round 0 or later) again
    with a DHT expiry 1e5 s ahead (review r31i F2). Before the expiry was signed the DHT kept those copies and refused
    the victims' later records, so a joiner read their stale rounds for ever and exited 3."""
    _, who, victims = scenario.split(":")
    if int(who) != node:
        return
    from hivemind.utils import ValueWithExpiration, get_dht_time

    from dgrpo.transports.dht import launch as dl
    from dgrpo.transports.dht.records import parse_subkey

    orig, want, held = dl.publish_launch, {int(v) for v in victims.split("/")}, {}

    def publish(t, round_idx=None, wait_s=10.0):
        orig(t, round_idx, wait_s)
        key, last = f"{t.namespace}/launch", round_idx if round_idx is not None else t.last_round
        if not held and last is not None and last >= 0:
            found = t.dht.get(key, latest=True)
            for subkey, item in (found.value.items() if isinstance(found, ValueWithExpiration) else ()):
                parsed = parse_subkey(subkey)
                if parsed and parsed[0] in want and isinstance(item, ValueWithExpiration):
                    held[parsed[0]] = (subkey, item.value)
        for victim, (subkey, value) in sorted(held.items()):
            ok = t.dht.store(key, value, get_dht_time() + 1e5, subkey=subkey)
            print(f"pinner {node}: node {victim}'s launch record stored again with a far expiry: stored={ok}", flush=True)

    dl.publish_launch = publish


def stale(scenario: str, node: int, args: list[str]) -> None:
    """``stale:R:V``: node R, before its launch, stores node V's hello, heard record and launch record of an earlier
    launch ``eeee…`` (same roster and config, node V's process ``eeee…``: signed 20 s ago with node V's key from the
    roster folder, as V's earlier process signed them and anyone could have kept them), each with the expiry V
    signed (still ahead); V's launch record there puts launch ``eeee…`` at round 1. Then R runs the honest code but
    signs every launch record of its own for launch ``eeee…`` at round 1 (issue 31, review r31i F6 within a record's
    signed lifetime: with V's old record that is a quorum of 3 for the earlier launch)."""
    _, who, victim = scenario.split(":")
    if int(who) != node:
        return
    from hivemind.utils import get_dht_time

    from dgrpo.swarm.identity import key_path, load_private_key
    from dgrpo.transports.dht import launch as dl
    from dgrpo.transports.dht.hellos import HELLO_TTL_S
    from dgrpo.transports.dht.records import seal

    victim, old = int(victim), "e" * 16
    key = load_private_key(key_path(next(a.split("=", 1)[1] for a in args if a.startswith("swarm.protocol.key_dir=")),
                                    victim))

    def record(t, round_idx):
        return {"run": old, "roster": {str(n): p for n, p in sorted(t.roster.items())}, "config": t.fingerprint,
                "alive": sorted(n for n in range(t.world_size) if n not in t.join), "round": round_idx, "agreed": {}}

    start = dl.start_launch

    def start_launch(t, fingerprint, startup_timeout_s):
        then = round(get_dht_time() - 20, 3)
        t.fingerprint = fingerprint
        for tag, body, ttl in (
                ("hello", {"process": old, "nonce": old, "config": fingerprint, "t": then}, HELLO_TTL_S),
                ("heard", {"process": old, "hellos": []}, startup_timeout_s + HELLO_TTL_S),
                ("launch", {**record(t, 1), "t": then}, t.retention_s)):
            subkey, value = seal(key, f"{t.namespace}/{tag}", victim, json.dumps(body).encode(), then + ttl)
            ok = t.dht.store(f"{t.namespace}/{tag}", value, then + ttl, subkey=subkey)
            print(f"stale {node}: node {victim}'s {tag} record of launch {old} stored again: stored={ok}", flush=True)
        publish(t)  # (its own vote for the earlier launch, before anyone's record of this one)
        return start(t, fingerprint, startup_timeout_s)

    def publish(t, round_idx=None, wait_s=10.0):
        body = {**record(t, 1), "t": round(get_dht_time(), 3)}
        t.signed.store(f"{t.namespace}/launch", json.dumps(body).encode(), t.retention_s, wait_s)

    dl.start_launch, dl.publish_launch = start_launch, publish


def in_threads(fns: list[Callable[[], object]]) -> tuple[list, float]:
    """Run each callable in its own thread (each joined for at most 120 s); return the results in order (or the
    exception each raised) and the wall time in seconds."""
    out, start = [None] * len(fns), time.monotonic()

    def body(i, fn):
        try:
            out[i] = fn()
        except Exception as err:  # noqa: BLE001 - the test inspects it
            out[i] = err
    threads = [threading.Thread(target=body, args=(i, fn)) for i, fn in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return out, time.monotonic() - start
