"""Launch agreement of a hivemind swarm without a central store: hellos, launch id, roster, launch records.

See :mod:`dgrpo.transports.hivemind` for the protocol; this module holds its start-up half (a joiner's reading of the
launch records: :mod:`dgrpo.transports.dht.joining`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.transports.fingerprint import PER_NODE, config_fingerprint  # noqa: F401 (the launch check compares it)
from dgrpo.transports.dht.hellos import HELLO_TTL_S, STABLE_S, HelloBook, proof_line, proof_record
from dgrpo.transports.dht.joining import LaunchBook, join_launch
from dgrpo.transports.dht.records import (HEADER_BYTES, SHARED_TTL_S, SignedRecordValidator, load_or_create_key,
                                         load_roster, public_hex, record_limit)
from dgrpo.transports.framing import KeyCaps

if TYPE_CHECKING:
    from dgrpo.config import RunConfig
    from dgrpo.transports.hivemind import HivemindTransport

log = logging.getLogger(__name__)


@dataclass
class Hello:
    """This node's hello while its launch is under way: ``says`` (process, nonce and config) signed with the DHT time ``t``
    under ``key``, signed and stored again with a new ``t`` by :meth:`refresh` when its time to live runs short
    (while the launch waits; :mod:`dgrpo.transports.dht.hellos`). ``body``: the bytes last stored."""

    t: "HivemindTransport"
    key: str
    says: dict
    body: bytes = b""
    due: float = 0.0  # time.monotonic() of the next store

    def refresh(self) -> None:
        if time.monotonic() >= self.due:
            from hivemind.utils import get_dht_time

            self.body = json.dumps({**self.says, "t": round(get_dht_time(), 3)}).encode()
            self.t.signed.store(self.key, self.body, HELLO_TTL_S)
            self.due = time.monotonic() + HELLO_TTL_S / 3


def start_node(cls: type["HivemindTransport"], cfg: "RunConfig") -> "HivemindTransport":
    """This process's node (:meth:`HivemindTransport.from_config <dgrpo.transports.hivemind.HivemindTransport.from_config>`):
    its keys, its DHT, its transport ``cls``, then the launch agreement or joining at its round.

    Raises:
        ConfigError: a bad key, roster or address; configs differ between nodes (names them).
        PeerFailure: the daemon did not start, no bootstrap peer answered, peers missing at launch.
    """
    from dgrpo.swarm.validation import Limits
    from dgrpo.transports.dht.node import start_dht

    sw, h = cfg.swarm, cfg.swarm.hivemind
    identity, key, roster = node_keys(cfg)
    logging.getLogger("hivemind").setLevel(max(logging.WARNING, logging.getLogger().level))
    dht = start_dht(h.node, listen=h.listen, announce=h.announce, initial_peers=h.initial_peers, identity_dir=identity,
                    validator=SignedRecordValidator(max_value_bytes=record_limit(sw.nodes) + HEADER_BYTES, allowed=roster),
                    daemon_timeout_s=h.daemon_timeout_s, startup_timeout_s=sw.startup_timeout_s,
                    use_relay=h.use_relay, use_auto_relay=h.use_auto_relay, client_mode=h.client_mode)
    addrs = [str(a) for a in dht.get_visible_maddrs()]
    (identity / "address").write_text("\n".join(addrs) + "\n")  # for scripts that start the other nodes
    log.info("node %d listening on %s; signing key %s", h.node, " ".join(addrs), public_hex(key))
    caps = KeyCaps.of(max(1, sw.prompts_per_round * sw.group_size // sw.nodes),
                      Limits.for_completions(cfg.sampling.max_new_tokens))  # per sender and round
    transport = cls(dht, h.node, sw.nodes, signing_key=key, namespace=f"dgrpo/{h.run_id or 'swarm'}",
                    honest=[n for n in range(sw.nodes) if n not in set(sw.malicious)], timeout_s=sw.timeout_s,
                    on_peer_failure=sw.on_peer_failure, max_messages=sw.prompts_per_round * sw.group_size,
                    join=h.join, roster=roster, fixed_roster=roster is not None, caps=caps)
    try:
        (join_launch if h.node in h.join else start_launch)(transport, config_fingerprint(cfg), sw.startup_timeout_s)
    except BaseException:
        transport.close(wait=False)
        raise
    return transport


def node_keys(cfg: "RunConfig"):
    """(identity folder, signing key, roster or None) of this process's node, checked against each other.

    The roster fixes every node's key before the run: ``swarm.hivemind.roster`` (the keys in each
    identity folder), else ``swarm.protocol.roster`` (a ``dgrpo keys`` roster: the node's message key
    ``node{k}.key`` signs its DHT records too; record and message signatures cover disjoint bytes, a
    domain tag against JSON), else none (each initial node's key is the one it announces at launch).
    A swarm with joiners needs a roster that names them: ``swarm.protocol.roster`` when messages are
    signed (``swarm.protocol.sign``), either one otherwise; a joiner's key is then agreed before round 0.

    Raises:
        ConfigError: an unreadable key or roster, a roster without some node or with another key for
            this one, joiners without a roster, or joiners planned at or after the last round.
    """
    from dgrpo.swarm.identity import Roster, key_path, load_private_key

    h, pc = cfg.swarm.hivemind, cfg.swarm.protocol
    identity = Path(h.identity_dir) if h.identity_dir else Path(cfg.out_dir) / ".hivemind" / f"node{h.node}"
    late = sorted(n for n, r in h.join.items() if r >= cfg.rounds)
    if late:
        raise ConfigError(f"swarm.hivemind.join: nodes {late} would join at or after round {cfg.rounds}, the end of the run")
    if h.join and not (pc.roster if pc.sign else pc.roster or h.roster):
        raise ConfigError(f"swarm.hivemind.join: the keys of joining nodes {sorted(h.join)} must be fixed before round 0 "
                          f"(else anyone could join as them): write every node's key with `dgrpo keys {cfg.swarm.nodes} "
                          "--out DIR` and run every node with swarm.protocol.roster=DIR/roster.json "
                          "swarm.protocol.key_dir=<folder with its node{k}.key> (docs/hivemind.md)")
    field = "swarm.hivemind.roster" if h.roster else "swarm.protocol.roster"
    key_file = identity / "signing.key" if h.roster or not pc.roster else key_path(pc.key_dir or Path(pc.roster).parent, h.node)
    try:
        if h.roster:
            key, roster = load_or_create_key(key_file), load_roster(h.roster)
        elif pc.roster:
            key = load_private_key(key_file)
            roster = dict(Roster.load(pc.roster).keys)
        else:
            key, roster = load_or_create_key(key_file), None
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if roster is not None:
        absent = sorted(set(range(cfg.swarm.nodes)) - set(roster))
        if absent or roster[h.node] != public_hex(key):
            raise ConfigError(f"{field} lacks nodes {absent}" if absent else
                              f"{field} gives node {h.node} another key than {key_file}")
    return identity, key, roster


def _json(body: bytes):
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def start_launch(t: "HivemindTransport", fingerprint: str, startup_timeout_s: float) -> None:
    """Initial nodes: hellos → heard records (every node relays the hellos it read) → equivocation, roster and
    config check → launch id → ``start`` barrier → launch record (:mod:`dgrpo.transports.dht.hellos`).

    Initial nodes missing after ``startup_timeout_s`` stop the launch, or, with ``on_peer_failure=continue``,
    are named and left out (failed at ``launch``; listed in the first round's ``rejected``, so ``peers.jsonl``
    names them), as over ``torch.distributed``; a node that comes later is told it was left out.

    Raises:
        ConfigError: configs differ (names the odd nodes), or this node's id is claimed by another key.
        PeerFailure: a node signed two different hellos (one line naming it, both quoted), initial nodes missing
            after ``startup_timeout_s`` (``abort``), peers reached another launch, or this node started after the
            others launched without it.
    """
    initial = sorted(n for n in range(t.world_size) if n not in t.join)
    hello_key = f"{t.namespace}/hello"
    says = {"process": secrets.token_hex(8), "nonce": secrets.token_hex(8), "config": fingerprint}  # (a new process
    own, book = Hello(t, hello_key, says), HelloBook(hello_key)  # each attempt: an earlier one's hellos prove nothing)
    deadline, delay, changed = time.monotonic() + startup_timeout_s, 0.05, time.monotonic()
    while True:
        own.refresh()
        claims: dict[int, set[str]] = {}
        for node, recs in t.signed.records(hello_key).items():
            for pub, body, sig in recs:
                hello = _json(body)
                if t.fixed_roster and t.roster.get(node) != pub:
                    t.signed.reject(hello_key, pub, -1, f"identity: a hello for node {node} signed by a key not in the roster")
                elif isinstance(hello, dict) and isinstance(hello.get("nonce"), str) and isinstance(hello.get("config"), str):
                    claims.setdefault(node, set()).add(pub)  # (this node's own hello is taken from its peers' relays
                    if node != t.rank and book.add(node, pub, body, sig.hex(), t.rank):  # only, as they take it)
                        changed = time.monotonic()
        others = claims.get(t.rank, set()) - {t.public_key}
        if others:
            raise ConfigError(f"node {t.rank} is also claimed by key {sorted(others)[0][:12]}…: another process runs as node "
                              f"{t.rank} (give each its own swarm.hivemind.node), or an earlier launch did with another "
                              f"key (wait {HELLO_TTL_S:g} s)")
        pubs = {n: next(iter(claims[n])) for n in initial if len(claims.get(n, ())) == 1}
        here = [n for n in pubs if n == t.rank or book.chosen(n, pubs[n]) is not None]
        if len(here) == len(initial) and (book.proofs(pubs) or time.monotonic() - changed >= STABLE_S):
            break  # (every node's hello, and nothing new for STABLE_S or already a proof: relayed below)
        if time.monotonic() >= deadline:
            missing = [n for n in initial if n not in claims or (n in pubs and n not in here)]
            doubled = [n for n in initial if len(claims.get(n, ())) > 1]
            parts = [f"nodes {missing} did not show up" if missing else "",
                     f"nodes {doubled} are claimed by several keys" if doubled else ""]
            if t.on_peer_failure == "continue" and missing and not doubled and t.rank not in missing:
                _leave_out(t, missing, startup_timeout_s)
                initial = [n for n in initial if n not in missing]
                pubs = {n: pubs[n] for n in initial}
                break
            raise PeerFailure(f"node {t.rank}: {'; '.join(p for p in parts if p)} within swarm.startup_timeout_s="
                              f"{startup_timeout_s:g}s (not started, not bootstrapped to this swarm, or another "
                              "swarm.hivemind.run_id?)")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    hear(t, book, pubs, own, startup_timeout_s)
    proofs = book.proofs(pubs)
    if proofs:
        for n, proof in sorted(proofs.items()):
            log.warning("node %d: proof that node %d signed %s: %s", t.rank, n, "two hellos" if len(proof) == 2 else
                        "hellos of too many processes", proof_record(n, pubs[n], *proof))
        raise PeerFailure("; ".join(proof_line(n, pubs[n], *proof, reader=t.rank) for n, proof in sorted(proofs.items()))
                          + "; stopping before round 0 rather than splitting the swarm")
    hellos = {n: (pubs[n], book.chosen(n, pubs[n]) or (own.says if n == t.rank else None)) for n in initial}
    odd = [n for n in initial if hellos[n][1]["config"] != hellos[initial[0]][1]["config"]]
    if odd:
        raise ConfigError(f"nodes {odd} run another config than node {initial[0]}: every node needs the same config and "
                          f"overrides ({', '.join('.'.join(f) for f in PER_NODE)} may differ)")
    t.enter_launch(hashlib.sha256(json.dumps(sorted([n, pub, h["nonce"]] for n, (pub, h) in hellos.items())).encode())
                   .hexdigest()[:16], fingerprint, {n: pub for n, (pub, _) in hellos.items()})
    try:  # a launch goes on only with every initial node (abort)
        t.gather_values("start", t.run_id, timeout_s=startup_timeout_s, abort=True, on_wait=own.refresh)
    except PeerFailure as err:
        without = _launched_without(t)
        if without:
            raise PeerFailure(f"node {t.rank}: the swarm launched without it ({without}) after its swarm.startup_timeout_s: "
                              "it started too late; start every node again, or plan it as a joiner "
                              "(swarm.hivemind.join)") from None
        raise PeerFailure(f"{err}: the peers did not reach launch {t.run_id} (a node restarted while the others "
                          "started?); start every node again") from None
    log.info("node %d: launch %s with nodes %s", t.rank, t.run_id, initial)
    allow_roster(t)
    publish_launch(t)


def hear(t: "HivemindTransport", book: HelloBook, pubs: dict[int, str], own: Hello, startup_timeout_s: float) -> None:
    """Relay the hellos this node read (its heard record under ``{namespace}/heard``, of its own process) and take
    every other initial node's (``pubs``: node → its key) until every node not yet proved to have signed two hellos
    has relayed (:mod:`dgrpo.transports.dht.hellos`). A relay quoting a hello its node never signed is named in the
    log (``heard:``), never acted on alone. A node's heard record counts only when it is of the process whose hello
    this node takes for it (:meth:`HelloBook.take`): one of an earlier process (an earlier launch's, stored again
    within its signed lifetime) is ignored, naming nobody, and its current one is waited for.

    Raises:
        PeerFailure: a node sent no heard record within ``startup_timeout_s`` (names it).
    """
    key, ttl = f"{t.namespace}/heard", SHARED_TTL_S  # (one life for every launch's: review r31j F6, records.py)
    deadline, delay, stored = time.monotonic() + startup_timeout_s, 0.05, False
    got: dict[int, str] = {}  # node → the process of the heard record taken from it
    ignored: set[bytes] = set()  # heard records of another process, each logged once

    def process(n: int) -> str | None:
        hello = book.chosen(n, pubs[n])
        return hello["process"] if hello else None

    while True:
        own.refresh()
        if not stored:  # (what this node read before it relays: what it decides on is what its peers get)
            stored = bool(t.signed.store(key, book.quote(pubs, own.says["process"]), ttl, wait_s=5.0))
        proved = book.proofs(pubs)  # (a relay taken may make another node's hello newer: its record is read again)
        waiting = [n for n in sorted(pubs) if n != t.rank and n not in proved and got.get(n) != process(n)]
        if stored and not waiting:
            return
        recs = t.signed.records(key, wait_s=min(5.0, max(0.2, deadline - time.monotonic()))) if waiting else {}
        for n in waiting:
            for pub, body, _ in recs.get(n, []):
                if pub != pubs[n] or got.get(n) == process(n):
                    continue
                bad = book.take(n, body, pubs)
                if bad is None:
                    if body not in ignored:
                        ignored.add(body)
                        log.info("node %d: node %d's heard record is not of the process of its hello (an earlier "
                                 "launch's, stored again?): ignored", t.rank, n)
                    continue
                got[n] = process(n)
                for why in bad:
                    t.signed.reject(key, f"{n}:{why}", n, f"heard: its heard record relays {why}")
        if time.monotonic() >= deadline:
            late = [n for n in waiting if got.get(n) != process(n)]
            if not late:
                raise PeerFailure(f"node {t.rank}: no DHT node took its heard record within swarm.startup_timeout_s="
                                  f"{startup_timeout_s:g}s (its DHT lost its peers?); start every node again")
            raise PeerFailure(f"node {t.rank}: node{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} sent "
                              f"nothing for exchange 'heard' within swarm.startup_timeout_s={startup_timeout_s:g}s "
                              "(dead or stalled, or restarted while the others launched); start every node again")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _leave_out(t: "HivemindTransport", missing: list[int], startup_timeout_s: float) -> None:
    """Launch without the initial nodes ``missing`` (``on_peer_failure=continue``): named, failed at ``launch``."""
    text = f"did not show up within swarm.startup_timeout_s={startup_timeout_s:g}s"
    log.warning("node %d: nodes %s %s; launching without them (swarm.on_peer_failure=continue)", t.rank, missing, text)
    t.leave_out(missing, "launch", f"missing payload: it {text}")


def _launched_without(t: "HivemindTransport") -> str:
    """The launch that more than half of the other initial nodes' launch records name, when it leaves this node out
    (``launch X, nodes [...]``; :class:`~dgrpo.transports.dht.joining.LaunchBook`: one node's record alone decides
    nothing), or "". Only the wording of a stop: the records it reads were signed before this node started (the
    others launched without it), so an earlier launch's, stored again, may be quoted here; records signed more than
    ``retention_s`` ago are not read (a running swarm signs its records each round; launch records live a day,
    ``SHARED_TTL_S``: a day-old launch is not quoted)."""
    from hivemind.utils import get_dht_time

    book = LaunchBook([n for n in range(t.world_size) if n not in t.join and n != t.rank], t.world_size,
                      since=get_dht_time() - t.retention_s)
    for node, (_, body, _) in t.signed.read(f"{t.namespace}/launch", set(book.expected)).items():
        book.add(node, body)
    j = book.decide()
    return f"launch {j.run}, nodes {[n for n in j.alive if n != t.rank]}" if j and t.rank not in j.alive else ""


def publish_launch(t: "HivemindTransport", round_idx: int | None = None, wait_s: float = 10.0) -> None:
    """(Re)publish this node's launch record: launch id, roster, agreed values, live nodes, last round, and ``t`` when
    it was signed (DHT time: a joiner ignores records signed before it started, :mod:`dgrpo.transports.dht.joining`),
    kept :data:`~dgrpo.transports.dht.records.SHARED_TTL_S` whatever the config (so an earlier launch's copy, stored
    again, never expires after it and keeps it out of the DHT: review r31j F6), waiting up to ``wait_s`` seconds for
    a DHT node to confirm it (an unconfirmed store goes on in the DHT process)."""
    last = round_idx if round_idx is not None else (t.last_round if t.last_round is not None else -1)
    from hivemind.utils import get_dht_time

    body = {"run": t.run_id, "roster": {str(n): p for n, p in sorted(t.roster.items())}, "config": t.fingerprint,
            "alive": sorted(t.alive), "round": last, "agreed": t.agreed, "t": round(get_dht_time(), 3)}
    t.signed.store(f"{t.namespace}/launch", json.dumps(body).encode(), SHARED_TTL_S, wait_s)  # (r31j F6, records.py)


async def _allow(dht, _node, roster: dict[int, str]) -> None:
    """Inside the DHT process: its record validator (``dht.validator``, see :func:`~dgrpo.transports.dht.node.start_dht`)
    takes ``roster``."""
    dht.validator.allow(roster)


def allow_roster(t: "HivemindTransport") -> None:
    """From now on this node's DHT stores and returns only records of the roster's (node, key) pairs
    (:meth:`~dgrpo.transports.dht.records.SignedRecordValidator.allow`): records under fresh keys cannot fill
    a round key past what one read carries (issue 31). Best effort: a DHT process that does not answer in
    5 s is logged (the reader still refuses such records, but a flood of them could hide the others)."""
    try:
        t.dht.run_coroutine(partial(_allow, roster=dict(t.roster)), return_future=True).result(timeout=5)
    except Exception as err:  # noqa: BLE001 - see above
        log.warning("node %d: its DHT process did not take the roster: %s", t.rank, err)


async def _drain(dht, _node) -> list:
    """Inside the DHT process: the validator's refusals since the last call."""
    out = list(dht.validator.rejections)
    dht.validator.rejections.clear()
    return out


def dht_rejections(t: "HivemindTransport", wait_s: float = 5.0) -> list[tuple[int, str]]:
    """The records this node's DHT refused since the last call (bad signatures: senders unknown), as
    ``rejected`` entries (-1, ``dht: reason``); none when the DHT process does not answer within ``wait_s`` seconds."""
    try:
        refused = t.dht.run_coroutine(_drain, return_future=True).result(timeout=wait_s)
    except Exception as err:  # noqa: BLE001 - counting is best effort; the DHT already logged each refusal
        log.debug("could not read the DHT's refusals: %s", err)
        return []
    return [(-1, f"dht: {reason}") for _, reason in refused]
