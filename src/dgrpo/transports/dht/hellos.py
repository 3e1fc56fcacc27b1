"""The hellos of a hivemind launch, and the proof that a node signed two of them (review r31g J6).

Each initial node stores a signed hello under ``{namespace}/hello`` (:class:`~dgrpo.transports.dht.launch.Hello`):
``{"process": 16 hex digits, "nonce": 16 hex digits, "config": fingerprint, "t": DHT time}``, signed again with a
new ``t`` at each refresh. ``process`` is drawn afresh by each process (each launch attempt) of the node: all the
hellos one process signs say the same thing, so two that share it and differ are that process's equivocation, and
a hello of the node's earlier process (another ``process``) never is (review r31i F5).
What a hello *says* is everything but ``t`` (:func:`identity`); ``t`` only dates it. A node's subkey holds one record,
so a node that stores a hello that says something else (another nonce, another config) replaces its first one: nodes
that read it at different moments read different hellos. Before, each node hashed the nonces it read into the launch
id, so they entered different launches and the ``start`` barrier failed after ``startup_timeout_s`` naming honest
nodes (review r31g J6).

So the launch reads hellos into a :class:`HelloBook`, and then every initial node relays what it read: its *heard*
record (``{namespace}/heard``, under its own subkey; :meth:`HelloBook.quote`), every hello of its peers it read, with
its record signature. A node takes a relayed hello only when the hello's signature verifies under its node's key
(:meth:`HelloBook.take`), and never a node's hellos relayed by that node itself (it could show each reader another);
a node takes its own hello from its peers' relays too, never from its own reads, so it decides on its own hello as
they do (its current one may be kept out of the DHT by a replay, below). So every hello one honest
node read reaches every honest node, as the views of a message round do (:mod:`dgrpo.transports.dht.commit`: two
rounds of an authenticated broadcast, Dolev and Strong's with one faulty node), and every honest node decides on the
same hellos:

* only a key's hellos dated within :data:`PAIR_S` of its newest one (the node's current process) are evidence: an
  older one is of an earlier process, of this launch or of any earlier one, and proves nothing (review r31k F2:
  before, an honest node's old crash loop, relayed in a later launch, was a proof below and stopped every launch);
* two hellos of one node's key and one ``process`` that say different things, dated at most :data:`PAIR_S` apart,
  are a signed proof that the node equivocated (:meth:`HelloBook.proofs`): every honest node stops at start-up in
  one line naming it and quoting both (:func:`proof_line`); an honest process signs one hello, so this names only a
  node that signed two in one process (a restart draws a new ``process``: never named);
* so are hellos of more than :data:`MAX_PROCESSES` different ``process`` ids of one key dated within
  :data:`PAIR_S` (a flood of hellos, each under a fresh process id: before, one every 0.1 s filled the
  :data:`MAX_IDS` hellos kept per key in about 6 s, and honest nodes that kept different ones chose different
  hellos and stopped at the ``start`` barrier after ``startup_timeout_s``, naming nobody or an honest node): an
  honest node starts that many processes in :data:`PAIR_S` only in a crash loop;
* otherwise each node's hello is the newest one (:meth:`HelloBook.chosen`), the same at every honest node.

Anyone can relay a node's hello of an earlier launch (in its own heard record), and store the record again until the
expiry its writer signed (:mod:`dgrpo.transports.dht.records`: a copy stored with another expiry is refused, so a
replay can no longer keep the node's current hello out of the DHT: its refresh signs a later expiry; review r31i
F2, F7). Such a replay is dated long before the node's current
hello: it proves nothing (dated over :data:`PAIR_S` before the node's newest hello, whether one hello or the hellos
of many processes: an honest node's crash loop of any earlier launch, relayed now, names nobody), and every honest
node takes the newest of the hellos relayed, so a replay some nodes read changes nothing, and one every node reads
alone is taken by all alike.
A hello of the node's previous process, relayed next to its current one when the launches run back to back (review
r31i F5: before, the two were a "proof" naming every honest node), carries another ``process``: it proves nothing,
and being dated before the current process started it loses to the current hello at every node.
Hivemind keeps its peers' clocks within :data:`CLOCK_S` of each other (it refuses a peer further off), so honest
nodes' dates can be compared.

A heard record names the process of its relayer (:meth:`HelloBook.quote`) and is taken only for the process of the
relayer's hello the reader holds (:meth:`HelloBook.take`): a heard record of an earlier launch, stored again within
its signed lifetime, is ignored in place of being read as the node's current relay (issue 31).

Limits: one faulty node (as the commit). A node whose current hello no honest node could read (kept out by such a
replay) and which the malicious node relays to some honest nodes only is taken differently: the launch ids differ and
the ``start`` barrier stops every node after ``startup_timeout_s`` (a stop, not a split swarm, but its lines call
the nodes of the other launch silent). A malicious node may sign a few hellos under fresh ``process`` ids, or many
dated over :data:`PAIR_S` / :data:`MAX_PROCESSES` apart: nothing then proves its equivocation, and every honest node
takes its newest hello (they hold the same ones, above). Of one key's hellos the :data:`MAX_IDS` newest are kept, a
newer one replacing the oldest (:meth:`HelloBook.add`; review r31j F8: before, the first 64 read were kept and later
ones refused, so a relay of an honest node's hellos of 64 earlier processes kept its current hello out at the
readers that took the relay first: they chose an old hello, and the ``start`` barrier stopped every node): what a
node keeps does not depend on the order it read them in (a proof held no longer stops a book taking newer hellos:
review r31k F2, a newer hello moves the window above), and a node's current hello, newer than any of its earlier
processes', is always kept; so every honest node decides on the hellos the honest nodes read, alike. A malicious
node that floods and then signs a hello dated over :data:`PAIR_S` later is proved nothing: its newest hello is taken
by all alike.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from dgrpo.transports.dht.records import signed_digest

HELLO_TTL_S = 30.0  # a hello outlives its node's launch by at most this (signed and stored again every TTL/3)
CLOCK_S = 3.0  # hivemind.utils.timed_storage.MAX_DHT_TIME_DISCREPANCY_SECONDS: peers' clocks differ by at most this
PAIR_S = HELLO_TTL_S + CLOCK_S  # two hellos of one key that say different things, dated at most this apart (seconds),
#                                 prove equivocation: an honest node's hellos are one process's, refreshed every TTL/3
STABLE_S = 0.25  # a node leaves its hello loop once the hellos it reads said nothing new for this long (s)
MAX_IDS = 64  # different hellos kept per node key, the newest (a newer one replaces the oldest: HelloBook.add)
MAX_PROCESSES = 3  # process ids of one key dated within PAIR_S that prove nothing; one more is a proof (a flood)
MAX_HELLO_BYTES = 512  # a hello is ~100 bytes
_NONCE_CHARS = 64


def parse_hello(body: bytes) -> dict | None:
    """A hello's fields (``process``, ``nonce``, ``config``: strings, ``process`` and ``nonce`` 1-64 characters; ``t``:
    a finite number of seconds, DHT time), or None for anything else (not JSON, not an object, a field missing or of
    another type)."""
    if not isinstance(body, bytes) or len(body) > MAX_HELLO_BYTES:
        return None
    try:
        hello = json.loads(body)
    except (ValueError, RecursionError):
        return None
    ok = (isinstance(hello, dict) and all(isinstance(hello.get(f), str) and 0 < len(hello[f]) <= _NONCE_CHARS
                                          for f in ("process", "nonce"))
          and isinstance(hello.get("config"), str) and isinstance(hello.get("t"), (int, float))
          and not isinstance(hello["t"], bool) and math.isfinite(hello["t"]))
    return hello if ok else None


def identity(hello: dict) -> str:
    """What a hello says: its fields but ``t``, as canonical JSON (two hellos that differ here are two hellos)."""
    return json.dumps({k: v for k, v in hello.items() if k != "t"}, sort_keys=True)


@dataclass(frozen=True)
class Version:
    """One hello as kept: ``hello`` (parsed), ``body`` (the signed bytes), ``sig`` (its record signature, 128 hex
    digits) and ``by``: the node that read it from the DHT (this node) or relayed it."""

    hello: dict
    body: bytes
    sig: str
    by: int

    @property
    def t(self) -> float:
        return float(self.hello["t"])


class HelloBook:
    """The hellos a node holds during its launch: node → public key (hex) → :func:`identity` → the newest
    :class:`Version` of it (at most :data:`MAX_IDS` per key).

    Args:
        key: the hello key, ``{namespace}/hello`` (the signatures cover its DHT id).
    """

    def __init__(self, key: str):
        self.key = key
        self.seen: dict[int, dict[str, dict[str, Version]]] = {}

    def add(self, node: int, pub: str, body: bytes, sig: str, by: int) -> bool:
        """Keep node ``node``'s hello ``body`` signed ``sig`` under key ``pub`` (the caller verified the signature),
        read by (or relayed by) node ``by``. Returns whether it says something new (a malformed hello is not kept).

        Of a key's hellos the :data:`MAX_IDS` newest (by ``t``, then :func:`identity`) are kept: a new one past that
        replaces the oldest, or is dropped if it is older than all (review r31j F8: before, the first 64 read were
        kept and later ones refused, so a relay of a node's hellos of 64 earlier processes kept its current hello out
        at the readers that took the relay first). So nodes that read the same hellos keep the same ones, in any
        order, and a node's current hello, newer than its earlier processes', is always kept."""
        hello = parse_hello(body)
        if hello is None:
            return False
        ids = self.seen.setdefault(node, {}).setdefault(pub, {})
        key, new = identity(hello), Version(hello, body, sig, by)
        if key not in ids and len(ids) >= MAX_IDS:  # (the MAX_IDS newest are kept, whatever the order read: r31j F8)
            oldest = min(ids, key=lambda k: (ids[k].t, k))
            if (new.t, key) <= (ids[oldest].t, oldest):
                return False
            del ids[oldest]
        old = ids.get(key)
        if old is None or new.t > old.t:
            ids[key] = new
        return old is None

    def nonces(self, node: int, pub: str) -> list[str]:
        """The nonces of node ``node``'s hellos under ``pub`` (sorted)."""
        return sorted({v.hello["nonce"] for v in self.seen.get(node, {}).get(pub, {}).values()})

    def chosen(self, node: int, pub: str) -> dict | None:
        """Node ``node``'s hello under ``pub``: the newest (then the greatest :func:`identity`); None when none."""
        ids = self.seen.get(node, {}).get(pub, {})
        return max(ids.items(), key=lambda kv: (kv[1].t, kv[0]))[1].hello if ids else None

    def proofs(self, pubs: dict[int, str]) -> dict[int, tuple[Version, ...]]:
        """node → its signed proof of equivocation under ``pubs[node]`` (:func:`_proof`): two hellos of one
        ``process`` that say different things dated at most :data:`PAIR_S` apart, else hellos of more than
        :data:`MAX_PROCESSES` processes; only hellos dated within :data:`PAIR_S` of the key's newest count (earliest
        first)."""
        out = {}
        for node, pub in sorted(pubs.items()):
            proof = _proof(list(self.seen.get(node, {}).get(pub, {}).values()))
            if proof is not None:
                out[node] = proof
        return out

    def quote(self, pubs: dict[int, str], process: str) -> bytes:
        """This node's heard record: the ``process`` id of its own hello (the record is of this process: readers
        take it only as such, :meth:`take`) and every hello it holds of the nodes ``pubs`` under their keys, as
        ``{"process": process, "hellos": [[node, public key hex, body (latin-1), signature hex], …]}``."""
        out = [[n, pub, v.body.decode("latin-1"), v.sig] for n, pub in sorted(pubs.items())
               for _, v in sorted(self.seen.get(n, {}).get(pub, {}).items())]
        return json.dumps({"process": process, "hellos": out}).encode()

    def take(self, relayer: int, raw: bytes, pubs: dict[int, str]) -> list[str] | None:
        """Take the hellos node ``relayer``'s heard record ``raw`` relays: those of nodes ``pubs`` under their keys
        whose record signature verifies; never ``relayer``'s own. Returns what was refused (one phrase each, for
        the log: a relayer that quotes a hello its node never signed is named there, never acted on alone), or None
        when the record is not of the process whose hello this node holds for ``relayer`` (:meth:`chosen`): a
        heard record of the relayer's earlier process (an earlier launch's, stored again within its signed
        lifetime) or of none; nothing of it is taken, and its signer is not named (anyone may store it again)."""
        try:
            rec = json.loads(raw)
            entries = rec["hellos"] if isinstance(rec, dict) and isinstance(rec.get("hellos"), list) else None
        except (ValueError, RecursionError):
            entries = None
        if entries is None:
            return ["its heard record is not {\"hellos\": [...]}"]
        hello = self.chosen(relayer, pubs.get(relayer, ""))
        if hello is None or rec.get("process") != hello["process"]:
            return None
        bad = []
        for e in entries[: MAX_IDS * len(pubs) + 1]:
            if not (isinstance(e, list) and len(e) == 4 and isinstance(e[0], int) and not isinstance(e[0], bool)
                    and all(isinstance(x, str) for x in e[1:])):
                bad.append("an entry that is not [node, key, body, signature]")
                continue
            node, pub, text, sig = e
            if node == relayer or pubs.get(node) != pub:
                continue  # (its own hellos, or a key that is not the launch's for that node: proves nothing here)
            try:
                body = text.encode("latin-1")
            except UnicodeEncodeError:
                body = None
            if body is None or not signed_digest(self.key, node, pub, hashlib.sha256(body).hexdigest(), sig):
                bad.append(f"a hello of node {node} that node {node} did not sign")
                continue
            self.add(node, pub, body, sig, relayer)
        return bad


def _proof(versions: list[Version]) -> tuple[Version, ...] | None:
    """A proof of equivocation among ``versions`` (each saying something else) dated within :data:`PAIR_S` of the
    newest of them (the node's current process: an older hello is an earlier process's, of this launch or any
    earlier one, and proves nothing; review r31k F2), earliest first (ties: by :func:`identity`): the two of one
    ``process`` dated closest (hellos of two processes are never a pair); else, when they hold hellos of more than
    :data:`MAX_PROCESSES` processes, the first hello of each of the first ``MAX_PROCESSES + 1``."""
    newest = max((v.t for v in versions), default=0.0)
    vs = sorted((v for v in versions if v.t >= newest - PAIR_S), key=lambda v: (v.t, identity(v.hello)))
    pairs = [(b.t - a.t, i, a, b) for i, a in enumerate(vs) for b in vs[i + 1:]
             if b.t - a.t <= PAIR_S and a.hello["process"] == b.hello["process"]]
    if pairs:
        return min(pairs, key=lambda p: p[:2])[2:]
    first: dict[str, Version] = {}
    for v in vs:  # (all within PAIR_S of each other)
        first.setdefault(v.hello["process"], v)
        if len(first) > MAX_PROCESSES:
            return tuple(first.values())
    return None


def _said(v: Version, reader: int) -> str:
    who = "read by this node" if v.by == reader else f"read by node {v.by}"
    return (f"process {v.hello['process'][:12]}, nonce {v.hello['nonce'][:12]}, config {v.hello['config'][:12]}, "
            f"t={v.t:.1f}, signature {v.sig[:16]}…, {who}")


def proof_line(node: int, pub: str, *proof: Version, reader: int) -> str:
    """One clause naming node ``node`` (key ``pub``) as the signer of the hellos ``proof`` (:func:`_proof`: a pair of
    one process, or hellos of more than :data:`MAX_PROCESSES` processes; this is node ``reader``)."""
    a, b = proof[0], proof[-1]
    if len(proof) == 2:
        return (f"node {node} signed two different hellos for this launch ({_said(a, reader)}; {_said(b, reader)}; "
                f"both signatures verify under node {node}'s key {pub[:12]}…, dated {b.t - a.t:.1f} s apart: one "
                "process of it showed its peers different hellos)")
    return (f"node {node} signed hellos of {len(proof)} different processes within {b.t - a.t:.1f} s for this launch "
            f"({'; '.join(_said(v, reader) for v in proof)}; every signature verifies under node {node}'s key "
            f"{pub[:12]}…: more than the {MAX_PROCESSES} processes a node may start in {PAIR_S:g} s, a flood of hellos)")


def proof_record(node: int, pub: str, *proof: Version) -> str:
    """The proof in full (JSON, logged): its hellos' bodies and record signatures, anyone can check them with
    :func:`dgrpo.transports.dht.records.signed_digest` under the hello key."""
    return json.dumps({"node": node, "key": pub, "hellos": [[v.body.decode("latin-1"), v.sig] for v in proof]})
