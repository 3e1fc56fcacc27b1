"""Adaptive round-timing attacks on the wait-note and fellows rules (review r31n G1, G2; dispatched by
``rank_scenarios.apply_scenario``, beside ``round_scenarios``). Each patches only the attacking rank's own process."""

from __future__ import annotations

import re
import threading
import time


def sticky_note(whom: str) -> None:
    """Review r31n: every wait note this rank serves names only ``whom`` (ranks joined by ``.``), and it serves one
    at each post of a round exchange ``r{n}`` / ``eq{n}`` (a claim, false or not)."""
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.waits import WaitNotes

    nodes, note, post = [int(x) for x in whom.split(".")], WaitNotes.note, DistributedTransport.post

    def named(self, tag, peers):
        return note(self, tag, nodes)

    def noted(self, tag, payload, framed=False):
        if re.fullmatch(r"(r|eq)\d+", tag):
            self.exchanger.notes.note(tag, nodes)
        return post(self, tag, payload, framed)

    WaitNotes.note, DistributedTransport.post = named, noted


def after_note(readers: str, pattern: str, victim: str, note_tag: str, max_s: str) -> None:
    """Review r31n G2 (adaptive): this rank serves keys matching ``pattern`` to ``readers`` (ranks joined by ``.``)
    only once node ``victim``'s server serves its wait note ``wait/{note_tag}`` (polled every 10 ms from the first
    refusal), plus 0.05 s; at the latest ``max_s`` after it first refused each reader."""
    from dgrpo.transports.peerserve import PeerChannel

    pat, serve, rs, st = re.compile(pattern), PeerChannel.serve, set(readers.split(".")), {}

    def watch(chan):
        end = time.monotonic() + 30
        while time.monotonic() < end:
            raw, _ = chan.fetch(int(victim), f"wait/{note_tag}", 8192, time.monotonic() + 0.5, 0.5)
            if raw:
                st["seen"] = time.monotonic()
                return
            time.sleep(0.01)

    def hold(self, key, reader):
        if not (pat.match(key) and reader in rs):
            return serve(self, key, reader)
        live = serve(self, key, reader)
        st.update({"v:" + key: live} if live is not None else {})
        t0 = st.setdefault((key, reader), time.monotonic())
        if "thread" not in st:
            st["thread"] = threading.Thread(target=watch, args=(self,), daemon=True)
            st["thread"].start()
        now = time.monotonic()
        if now < st.get("seen", now + 1) + 0.05 and now - t0 < float(max_s):
            return None
        return live or st.get("v:" + key)

    PeerChannel.serve = hold


def accuse_at(tag: str, victim: str) -> None:
    """Review r31n: as this rank posts exchange ``tag`` it accuses ``victim`` of missing it (signed, its own key;
    it serves ``end/{tag}`` as usual, when it leaves)."""
    from dgrpo.transports.distributed import DistributedTransport

    post = DistributedTransport.post

    def posted(self, t, payload, framed=False):
        out = post(self, t, payload, framed)
        if t == tag and int(victim) in self.alive:
            self.exchanger.ledger.accuse(int(victim), t)
        return out

    DistributedTransport.post = posted


def no_end(pattern: str) -> None:
    """Review r31n G1: this rank never serves ``end/{tag}`` for exchanges matching ``pattern``, so its peers'
    :class:`~dgrpo.transports.witnesses.Witnesses` count it as still in them for good."""
    from dgrpo.transports.waits import WaitNotes

    pat, ended = re.compile(pattern), WaitNotes.ended
    WaitNotes.ended = lambda self, tag: None if pat.fullmatch(tag) else ended(self, tag)


def skip_read(victim: str, first: str = "1") -> None:
    """Task h31t2: this rank never reads ``victim``'s round payloads ``r{n}`` for n >= ``first`` (so its relays never
    carry ``victim``'s messages to anyone; it does not accuse ``victim`` of them either)."""
    from dgrpo.transports.distributed import DistributedTransport

    collect, v = DistributedTransport.collect, int(victim)

    def skipping(self, tag, peers, deadline=None):
        if re.fullmatch(r"r\d+", tag) and int(tag[1:]) >= int(first):
            peers = [p for p in peers if p != v]
        return collect(self, tag, peers, deadline)

    DistributedTransport.collect = skipping


def serve_at(readers: str, pattern: str, at: str, first: str = "1") -> None:
    """Review r31t's s4n2ev2 (task h31u1): keys matching ``pattern`` (their leading ``r{n}``/``eq{n}`` naming the
    exchange) are served to ``readers`` (ranks joined by ``.``) only ``at`` seconds after this rank posted that exchange
    (one moment for every listed reader: released together), from round ``first`` on; other readers as usual."""
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.peerserve import PeerChannel

    pat, serve, post, rs, st = re.compile(pattern), PeerChannel.serve, DistributedTransport.post, set(readers.split(".")), {}

    def posted(self, tag, payload, framed=False):
        st[tag] = time.monotonic()
        return post(self, tag, payload, framed)

    def later(self, key, reader):
        m = re.match(r"^((?:r|eq)(\d+))/", key)
        if not (pat.match(key) and reader in rs and m and int(m.group(2)) >= int(first)):
            return serve(self, key, reader)
        live = serve(self, key, reader)
        st.update({"v:" + key: live} if live is not None else {})  # (kept: its own later rounds delete the key)
        t = st.get(m.group(1))
        return None if t is None or time.monotonic() < t + float(at) else live or st.get("v:" + key)

    DistributedTransport.post, PeerChannel.serve = posted, later


def apply(kind: str, rest: list[str]) -> None:
    """``sticky:R:WHOM`` (:func:`sticky_note`), ``afternote:R:READERS:REGEX:V:TAG:MAX`` (:func:`after_note`),
    ``accat:R:TAG:V`` (:func:`accuse_at`), ``noend:R:REGEX`` (:func:`no_end`), ``skipread:R:V[:FIRST]``
    (:func:`skip_read`), ``serveat:R:READERS:REGEX:SECONDS[:FIRST]`` (:func:`serve_at`)."""
    return {"sticky": sticky_note, "afternote": after_note, "accat": accuse_at, "noend": no_end,
            "skipread": skip_read, "serveat": serve_at}[kind](*rest)
