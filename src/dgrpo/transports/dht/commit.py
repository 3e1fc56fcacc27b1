"""The commit step that ends a message round of the hivemind transport: the honest nodes keep the same messages,
and no lone node can get another dropped (issue 31).

Reads of a DHT are not atomic: a payload that arrives near the deadline may be seen by some nodes and not by
others, and a malicious node may show peers different records under its one subkey (replaced between reads:
equivocation) or time a record to reach some nodes in time and others not. So after the exchange ``r{round}``
come two rounds of views (an authenticated broadcast of the views, as Dolev and Strong's with one faulty node):

1. ``v{round}``, the views: for each payload a node kept, the body's SHA-256 and the sender's record signature over
   it (:func:`dgrpo.transports.dht.records.signed_digest`), so a view can only list what the sender signed for that key;
   under ``"bye"`` the same of each signed ``bye`` it read in the payload phase (task h31t3: the relay of byes).
2. ``e{round}``, the echo: every node relays each view it read with its voter's record signature (zlib-packed; the
   body left out when it is malformed or above :func:`view_limit`). A node takes a view from the echo of any node
   but the view's own voter, so a view that one honest node read reaches every honest node, and every honest node
   holds the same signed views: two of one voter prove it equivocated (it is dropped, its views ignored), a voter
   whose view reached only some nodes is taken back by the others.

Each node then decides for every sender ``n`` from those views of the nodes other than ``n`` (its own included; a
view entry that does not verify counts as absent and is named under the view's sender):

* two different digests signed by ``n``: ``n`` equivocated (the proof travels in the views), dropped;
* a ``bye`` signed by ``n``: it left, failed at every honest node alike; with its payload listed too, it said bye to
  some and sent to others (``equivocation``), dropped (before, only the node that read the bye acted on it, at once:
  under ``abort`` it stopped alone);
* missed by at least two of those views (one, when there is only one) and by more than half of them:
  ``n`` was late, dropped; a node that finds itself so dropped leaves the swarm;
* otherwise ``n`` is kept; each node that holds its payload relays it (``r{round}x{n}``) and a node that missed
  it reads it again, from its record or a relay (leaving if it still cannot: a sender that replaced its record
  after some nodes read it can no longer keep a node from reading what its peers kept), and each view that left
  ``n`` out is named under its sender (``accusation``), never acted on alone.

Both rounds of views end at fixed shares of ``timeout_s`` counted from the start of the round, the views at 2/4 and
the echo at 3/4, and a second read of a payload at 4/4 (:mod:`dgrpo.transports.dht.rounds`, which says why these
shares keep every view an honest node read reaching every honest node whose round starts within ``timeout_s``/4 of
its own). A node that withholds its view or echo costs its peers the rest of that phase once; then it is failed.
The echo phase waits for the echo of every node whose payload a view lists, at every honest node alike, so no view
timed to reach one honest node alone makes that node's round end later than the others' (review r31e G3).

Dropped senders are declared failed (``swarm.on_peer_failure``) and named (``missing payload``, ``equivocation``).
The decision is a function of views every honest node holds alike, so with one malicious node and honest nodes on
time (rounds started within ``timeout_s``/4 of each other) the honest nodes keep the same payloads: a malicious view
can still tip a payload that reached some honest nodes and not others (a late honest node is then dropped, or kept,
by all), never split them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import zlib
from typing import TYPE_CHECKING

from dgrpo.errors import PeerFailure
from dgrpo.transports.dht import byes
from dgrpo.transports.dht.records import signed_digest
from dgrpo.transports.dht.rounds import RoundClock, call_limit

if TYPE_CHECKING:
    from dgrpo.transports.hivemind import HivemindTransport

log = logging.getLogger(__name__)


def view_limit(nodes: int) -> int:
    """Bytes of the largest well-formed view of a swarm of ``nodes``: ``"n": ["digest", "signature"]`` per node, for
    its payload and for its bye (under ``"bye"``)."""
    return 512 * nodes + 96


def _node_id(key: str) -> int:
    """A view's node key as a node id, -1 for anything else (not int('²'))."""
    return int(key) if key.isascii() and key.isdigit() and len(key) < 7 else -1


def _sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _usable(raw: bytes | None, nodes: int) -> dict | None:
    """A view body as every honest node judges it: a JSON object of at most :func:`view_limit` bytes, else None."""
    try:
        view = json.loads(raw) if raw is not None and len(raw) <= view_limit(nodes) else None
    except (ValueError, RecursionError):
        return None
    return view if isinstance(view, dict) else None


def _echo(t: "HivemindTransport", read: dict[int, tuple[str, bytes]]) -> bytes:
    """This node's echo: voter → [view record signature, digest, body or None], zlib-packed; a body is left out
    (None) when it is not usable, or every body when the echo would not fit a record (logged)."""
    def pack(bodies: bool) -> bytes:
        return zlib.compress(json.dumps({str(v): [sig, _sha(raw), raw.decode("latin-1") if bodies and
                                                  _usable(raw, len(t.roster)) is not None else None]
                                         for v, (sig, raw) in sorted(read.items())}).encode())
    out = pack(True)
    if len(out) > t.max_record_bytes:
        log.warning("node %d: its echo has %d bytes, above a record's limit: it relays the views' digests only",
                    t.rank, len(out))
        out = pack(False)
    return out


def _relayed(t: "HivemindTransport", echoer: int, blob: bytes, vkey: str, tag: str) -> list[tuple[int, str, bytes | None]]:
    """The views of other voters that node ``echoer`` relays, signed by their voters: [(voter, digest, body or None)].
    A malformed echo, or a view its voter did not sign, is named under ``echoer`` (a node relays what it verified)."""
    unpack, nodes = zlib.decompressobj(), len(t.roster)
    try:
        echo = json.loads(unpack.decompress(blob, nodes * (2 * view_limit(nodes) + 512) + 4096))
        ok = isinstance(echo, dict) and not unpack.unconsumed_tail
    except (zlib.error, ValueError, RecursionError):
        ok = False
    if not ok:
        t.signed.reject(vkey, f"echo{echoer}", echoer, f"echo: its echo of exchange {tag!r} is not zlib-packed views")
        return []
    out = []
    for voter, entry in echo.items():
        v = int(voter) if voter.isascii() and voter.isdigit() and len(voter) < 7 else -1  # (not int('²'))
        if v == echoer:
            continue  # its own view, relayed by itself: proves nothing its peers did not read
        ok = v in t.roster and isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], (str, type(None)))
        try:
            body = entry[2].encode("latin-1") if ok and entry[2] is not None else None
        except UnicodeEncodeError:
            ok, body = False, None
        ok = ok and (body is None or _sha(body) == entry[1]) and signed_digest(vkey, v, t.roster[v], entry[1], entry[0])
        if not ok:
            t.signed.reject(vkey, f"echo{echoer}>{voter[:8]}", echoer, f"echo: its echo of exchange {tag!r} relays a view "
                                                                       f"node {voter[:8]} did not sign")
            continue
        out.append((v, entry[1], body))
    return out


def agreed_views(t: "HivemindTransport", round_idx: int, raws: dict[int, bytes], clock: RoundClock
                 ) -> tuple[dict[int, dict], dict, set[int]]:
    """(voter → its view, voter → (rule, what it did) for the voters that signed two views, the peers
    :func:`_in_play` whose echo did not come) after the echo ``e{round}``, read until the round's echo phase ends:
    the same at every honest node (module docstring). A voter whose one view is not usable is declared failed; every
    voter failed in ``v{round}`` is named, and one whose view came only through an echo (``late view``)."""
    tag, vtag = f"r{round_idx}", f"v{round_idx}"
    vkey, sigs = t.signed.key(vtag), t.seals.get(vtag, {})
    versions: dict[int, dict[str, bytes | None]] = {v: {_sha(raw): raw} for v, raw in raws.items()}
    for v in sorted(v for v, raw in raws.items() if _usable(raw, len(t.roster)) is None):
        t.declare_failed([v], vtag, why="sent a malformed view")  # (now: the echo does not wait for it)
    echo = _echo(t, {v: (sigs[v].hex(), raw) for v, raw in raws.items() if v in sigs})
    echoes = t.exchange(f"e{round_idx}", echo, deadline=clock.end("echo"), limit=clock.limit("echo"))
    in_play = _in_play(t, round_idx, raws)  # (waited for alike at every honest node: a round ends on no lone sight)
    echoes.update(_read_until(t, f"e{round_idx}", in_play - echoes.keys(), clock.end("echo")))
    for echoer, blob in sorted(echoes.items()):
        for v, digest, body in _relayed(t, echoer, blob, vkey, tag) if echoer != t.rank else []:
            if versions.setdefault(v, {}).get(digest) is None:
                versions[v][digest] = body
    views, equivocated = {}, {}
    for v, seen in sorted(versions.items()):
        view = _usable(next(iter(seen.values())), len(t.roster)) if len(seen) == 1 else None
        if len(seen) > 1:
            equivocated[v] = ("equivocation", f"signed {len(seen)} different views")
        elif view is None and v in t.alive:
            t.declare_failed([v], vtag, why="sent a malformed view")
        elif view is not None:
            views[v] = view
            if t.failed.get(v) == vtag:
                t.readmit(v)  # its view reached some nodes only: every node takes it
                t.signed.reject(vkey, f"late{v}", v, f"late view: its view of exchange {tag!r} reached this node only "
                                                     f"through a peer's echo, after {clock.limit('views')}")
    for peer in sorted(n for n, tag_ in t.failed.items() if tag_ == vtag):  # named in peers.jsonl
        t.signed.reject(vkey, f"missing{peer}", peer,
                        f"view: its view of exchange {tag!r} is not a JSON object" if peer in versions
                        else f"missing view: it sent no view of exchange {tag!r} within {clock.limit('views')}")
    return views, equivocated, in_play - echoes.keys()


def _in_play(t: "HivemindTransport", round_idx: int, raws: dict[int, bytes]) -> set[int]:
    """The peers whose echo this node waits for: the live ones and every node whose payload a view this node read
    lists under that node's own record signature. Each honest node's view lists every payload it read, and reaches
    every honest node in its views phase (:mod:`dgrpo.transports.dht.rounds`), so a peer one honest node waits for
    is waited for by all, each until its own echo mark: the round ends alike (review r31e G3)."""
    key, out = t.signed.key(f"r{round_idx}"), set(t.alive)
    for raw in raws.values():
        for node, entry in (_usable(raw, len(t.roster)) or {}).items():
            n = int(node) if node.isascii() and node.isdigit() and len(node) < 7 else -1
            if n in t.roster and n not in out and isinstance(entry, list) and len(entry) == 2 \
                    and signed_digest(key, n, t.roster[n], *entry):
                out.add(n)
    return out - {t.rank}


def _read_until(t: "HivemindTransport", tag: str, peers: set[int], deadline: float) -> dict[int, bytes]:
    """The records of ``peers`` (not live here) in exchange ``tag``, read until they are in or ``deadline``."""
    got: dict[int, bytes] = {}
    while peers - got.keys():
        got.update({n: rec[1] for n, rec in t.signed.read(t.signed.key(tag), peers - got.keys(),
                                                           call_limit(deadline)).items()})
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    return got


def commit(t: "HivemindTransport", round_idx: int, payloads: dict[int, bytes], clock: RoundClock | None = None
           ) -> dict[int, bytes]:
    """Keep the payloads the views vouch for (module docstring); ``payloads``: what this node read
    (its own included), their record signatures in ``t.seals[f"r{round_idx}"]``; ``clock``: the round's
    deadlines (default: a round starting now).

    Raises:
        PeerFailure: this node is dropped by its peers' views or cannot read a payload they kept, or
            (``on_peer_failure=abort``) a payload was dropped.
    """
    tag, seals = f"r{round_idx}", t.seals.get(f"r{round_idx}", {})
    key, vkey = t.signed.key(tag), t.signed.key(f"v{round_idx}")
    mine: dict = {str(n): [_sha(b), seals[n].hex()] for n, b in payloads.items() if n in seals}
    if t.stops.byes:  # (relayed, so that every honest node acts on a bye here, alike: task h31t3)
        mine["bye"] = {str(n): [_sha(body), sig.hex()] for n, (body, sig) in sorted(t.stops.byes.items())}
    clock = clock or RoundClock.now(t.timeout_s)
    raws = t.exchange(f"v{round_idx}", json.dumps(mine).encode(), deadline=clock.end("views"), limit=clock.limit("views"))
    views, dropped, silent = agreed_views(t, round_idx, raws, clock)
    said, quotes = _byes(t, views, tag), {}  # (node → voter → digest of its signed bye; node → its stop reason)

    def listed(voter: int, node: int) -> str | None:
        entry = views[voter].get(str(node))
        if entry is None:
            return None
        if isinstance(entry, list) and len(entry) == 2 and signed_digest(key, node, t.roster[node], *entry):
            return entry[0]
        t.signed.reject(vkey, f"{voter}>{node}", voter, f"view: its view of exchange {tag!r} gives node {node} a digest "
                                                         f"node {node} did not sign")
        return None

    wanted: dict[int, str] = {}  # node → the digest of its payload this node missed and must read again
    for node in sorted(t.roster):
        voters = [v for v in views if v != node]
        digests = {v: d for v in voters if (d := listed(v, node)) is not None}
        misses = [v for v in voters if v not in digests]
        if node in dropped:
            pass
        elif node in said and node != t.rank:  # (it said bye: out at every honest node; with a payload, equivocation)
            readers, quotes[node] = sorted(said[node]), _reason(t, node, said[node], clock)
            dropped[node] = ("equivocation", f"said bye (signed; read by nodes {readers}) while its payload reached "
                                             f"nodes {sorted(digests)}") if digests else \
                ("missing payload", f"left the swarm (its signed bye read by nodes {readers})")
        elif not digests and node not in payloads and node != t.rank:  # nobody holds it
            if t.failed.get(node) == tag:  # declared failed when it was missed in this round: named
                t.signed.reject(key, f"dropped{node}", node, f"missing payload: it sent nothing for exchange {tag!r} within "
                                                             f"{clock.limit('payloads')}")
            continue
        elif len(set(digests.values())) > 1:
            dropped[node] = ("equivocation", f"signed {len(set(digests.values()))} different payloads, shown to nodes "
                                             f"{sorted(digests)} (equivocation)")
        elif voters and len(misses) >= min(2, len(voters)) and 2 * len(misses) > len(voters):
            dropped[node] = ("missing payload", f"was missed by nodes {misses}")
        else:
            for v in misses:
                t.signed.reject(vkey, f"{v}-{node}", v, f"accusation: its view of exchange {tag!r} leaves out node {node}, "
                                                        f"whose payload nodes {sorted(digests)} list")
            if node != t.rank and node not in payloads:
                wanted[node] = next(iter(digests.values()))
            elif misses and node != t.rank:  # relayed for the nodes that missed it (its record may be gone)
                t.signed.store(t.signed.key(f"{tag}x{node}"), payloads[node], t.retention_s, clock.left("read again"))
        if node == t.rank and node in dropped:
            t.leave()
            raise PeerFailure(f"node {t.rank} was declared failed by its peers in exchange {tag!r}: it {dropped[node][1]} "
                              f"within {clock.limit('payloads')} (stalled?); leaving the swarm")
    for node, digest in sorted(wanted.items()):
        payloads[node] = _read_again(t, key, node, digest, tag, clock)
    for node, (rule, why) in sorted(dropped.items()):
        t.signed.reject(key, f"dropped{node}", node, f"{rule}: it {why} in exchange {tag!r}")
        if node in t.alive or node in t.stops.pending:  # (pending: missed here, its abort held to this decision)
            t.declare_failed([node], tag, quotes, why=why)
    etag = f"e{round_idx}"
    for peer in sorted(silent - dropped.keys()):  # no echo: failed in e{round} at every honest node (payload stands)
        if peer in t.alive:
            t.declare_failed([peer], etag, limit=clock.limit("echo"))
        if t.failed.get(peer) == etag:
            t.signed.reject(t.signed.key(etag), f"missing{peer}", peer,
                            f"missing echo: it sent no echo of exchange {tag!r} within {clock.limit('echo')}")
    return {n: b for n, b in payloads.items() if n not in dropped}


def _byes(t: "HivemindTransport", views: dict[int, dict], tag: str) -> dict[int, dict[int, str]]:
    """node → {voter: digest} of the byes the agreed ``views`` relay that their node signed (a voter's own counts for
    nothing: it could show it to some only); an entry its node did not sign is named under the voter (``view``)."""
    bkey, vkey, out = t.signed.key("bye"), t.signed.key(f"v{tag[1:]}"), {}
    for voter, view in sorted(views.items()):
        entries = view.get("bye", {})
        for node, entry in (entries.items() if isinstance(entries, dict) else [("?", None)]):
            n = _node_id(node)
            if n in (voter, t.rank) and n in t.roster:
                continue
            if n in t.roster and isinstance(entry, list) and len(entry) == 2 and signed_digest(bkey, n, t.roster[n], *entry):
                out.setdefault(n, {})[voter] = entry[0]
            else:
                t.signed.reject(vkey, f"bye{voter}>{node[:8]}", voter, f"view: its view of exchange {tag!r} relays a bye "
                                                                       f"node {node[:8]} did not sign")
    return out


def _reason(t: "HivemindTransport", node: int, digests: dict[int, str], clock: RoundClock) -> str | None:
    """The stop reason node ``node``'s bye carries (:func:`dgrpo.transports.dht.byes.why_of`), from this node's read
    of it or one more (its body is not in the views), if its digest is one the views relay; else None."""
    body = t.stops.byes.get(node, (None,))[0]
    if body is None:
        rec = t.signed.read(t.signed.key("bye"), {node}, clock.left("read again")).get(node)
        body = rec[1] if rec is not None else None
    return byes.why_of(body) if body is not None and _sha(body) in digests.values() else None


def _read_again(t: "HivemindTransport", key: str, node: int, digest: str, tag: str, clock: RoundClock) -> bytes:
    """Node ``node``'s payload under ``key`` whose SHA-256 is ``digest``, read until the round ends (at least one
    read), from its record or from the relays of the peers that kept it (``{tag}x{node}``: its record may have been
    replaced since, by a sender showing this node another payload); it takes part again (this node had declared it
    failed when it missed it).

    Raises:
        PeerFailure: not found in time: this node cannot keep what its peers keep, so it leaves.
    """
    deadline = clock.end("read again")
    while True:
        rec = t.signed.read(key, {node}, clock.left("read again")).get(node)
        relays = t.signed.records(t.signed.key(f"{tag}x{node}"), clock.left("read again"))
        relayed = [body for claims in relays.values() for _, body, _ in claims]
        for body in ([rec[1]] if rec is not None else []) + relayed:
            if _sha(body) == digest:
                t.readmit(node)
                return body
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    t.leave()
    raise PeerFailure(f"node {t.rank} could not read node {node}'s payload of exchange {tag!r}, which its peers kept, "
                      f"within {clock.limit('read again')}; leaving the swarm")
