"""Round-timing attacks a rank of a test swarm plays (review r31d; dispatched by ``rank_scenarios.apply_scenario``).
Each patches only the attacking rank's own process: what its server serves, or when it posts."""

from __future__ import annotations

import json
import os
import re
import time


def withhold(victim: str, pattern: str = r"^eq\d+/data/") -> None:
    """This rank's server never serves keys matching ``pattern`` (default: its relays ``eq{r}``) to reader
    ``victim`` (a rank, or ``low``: the lowest live rank other than itself, chosen afresh at each read); every
    other reader gets them (it forges nothing and writes nothing to the store)."""
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.peerserve import PeerChannel

    state, pat = {}, re.compile(pattern)
    post, serve = DistributedTransport.post, PeerChannel.serve

    def keep(self, tag, payload, framed=False):
        state["t"] = self
        return post(self, tag, payload, framed)

    def hide(self, key, reader):
        t = state.get("t")
        if t is not None and pat.match(key) and reader.isdigit():
            target = min(set(t.alive) - {t.rank}, default=-1) if victim == "low" else int(victim)
            if int(reader) == target:
                return None
        return serve(self, key, reader)

    DistributedTransport.post, PeerChannel.serve = keep, hide
    print(f"rank withholding {pattern} from reader {victim}", flush=True)


def accusation_junk(victim: str) -> None:
    """Review r31j F3: this rank's server serves reader ``victim`` a junk line before its accusations (``accuse``),
    from the start (that reader names it once and never reads its accusations again); every other reader gets them
    as they are."""
    from dgrpo.transports.peerserve import PeerChannel

    serve = PeerChannel.serve

    def junk(self, key, reader):
        out = serve(self, key, reader)
        return b"junk\n" + (out or b"") if key == "accuse" and reader == victim else out

    PeerChannel.serve = junk
    print(f"rank serving junk as its accusations to reader {victim}", flush=True)


def post_late(seconds: float, relay_s: float | None = None, pattern: str = r"^(r|eq)\d+$") -> None:
    """This rank posts each exchange matching ``pattern`` ``seconds`` late (just before its peers' deadline); its
    relays ``eq{n}`` ``relay_s`` late when given."""
    from dgrpo.transports.distributed import DistributedTransport

    pat, post = re.compile(pattern), DistributedTransport.post

    def late(self, tag, payload, framed=False):
        if pat.match(tag):
            time.sleep(relay_s if relay_s is not None and tag.startswith("eq") else seconds)
        return post(self, tag, payload, framed)

    DistributedTransport.post = late


def note_late(first: float, late_r: float, late_eq: float) -> None:
    """Review r31e G1: this rank serves a signed wait note naming every other live node in each exchange ``r{n}``
    and ``eq{n}`` (a false claim), then posts it late: ``r0`` ``first`` s, later ``r{n}`` ``late_r`` s, ``eq{n}``
    ``late_eq`` s."""
    from dgrpo.transports.distributed import DistributedTransport

    post = DistributedTransport.post

    def late(self, tag, payload, framed=False):
        m = re.fullmatch(r"(r|eq)(\d+)", tag)
        if m:
            self.exchanger.notes.note(tag, sorted(set(self.alive) - {self.rank}))
            time.sleep(late_eq if m.group(1) == "eq" else first if tag == "r0" else late_r)
        return post(self, tag, payload, framed)

    DistributedTransport.post = late


def false_note(tag: str, whom: str) -> None:
    """Review r31l F2: as this rank posts exchange ``tag``, it serves a signed wait note of it naming ``whom``
    (ranks joined by ``.``), whether or not it waited for them."""
    from dgrpo.transports.distributed import DistributedTransport

    post, nodes = DistributedTransport.post, [int(x) for x in whom.split(".")]

    def noted(self, t, payload, framed=False):
        if t == tag:
            self.exchanger.notes.note(t, nodes)
        return post(self, t, payload, framed)

    DistributedTransport.post = noted


def delay_for(victim: str, pattern: str, seconds: str) -> None:
    """Review r31m F2: this rank's server serves keys matching ``pattern`` to reader ``victim`` only ``seconds`` after
    it first refused one (the value kept: its own later rounds delete the key)."""
    from dgrpo.transports.peerserve import PeerChannel

    pat, serve, state = re.compile(pattern), PeerChannel.serve, {}

    def slow(self, key, reader):
        if not (pat.match(key) and reader == victim):
            return serve(self, key, reader)
        t0 = state.setdefault(key, time.monotonic())
        live = serve(self, key, reader)
        state.update({"v:" + key: live} if live is not None else {})
        return None if time.monotonic() - t0 < float(seconds) else live or state.get("v:" + key)

    PeerChannel.serve = slow


def end_accuse(tag: str, victim: str) -> None:
    """Review r31m F2: as this rank posts exchange ``tag`` it says it left it (``end/{tag}`` served at once, so its
    peers no longer count it as still in it) and accuses ``victim`` of missing it (signed, its own key)."""
    from dgrpo.transports.distributed import DistributedTransport

    post = DistributedTransport.post

    def posted(self, t, payload, framed=False):
        out = post(self, t, payload, framed)
        if t == tag:
            self.exchanger.notes.ended(t)
            self.exchanger.ledger.accuse(int(victim), t)
        return out

    DistributedTransport.post = posted


def relay_note(victim: str) -> None:
    """The limit h31y left: this rank serves a signed note in each ``r{n}`` naming every other live node (it claims
    it waited for their round payloads: false) and never serves its relays ``eq{n}`` to reader ``victim``."""
    from dgrpo.transports.distributed import DistributedTransport

    withhold(victim)
    post = DistributedTransport.post

    def noted(self, tag, payload, framed=False):
        if re.fullmatch(r"r\d+", tag):
            self.exchanger.notes.note(tag, sorted(set(self.alive) - {self.rank}))
        return post(self, tag, payload, framed)

    DistributedTransport.post = noted


def why_read() -> None:
    """Review r31f H5: from its first post, this rank keeps reading every other rank's stop reason (``why``) and
    ``done/data/{k}`` in the name of each of that rank's other peers (``X-Dgrpo-Reader``), as if they had read it,
    every 20 ms."""
    import http.client
    import threading

    from dgrpo.transports.distributed import DistributedTransport

    post, state = DistributedTransport.post, {}

    def spoof(t):
        others = sorted(set(range(t.world_size)) - {t.rank})
        while True:
            for owner in others:
                addr = t.chan.address_of(owner)
                for key in ("why", f"done%2Fdata%2F{owner}") if addr else ():
                    for reader in set(others) - {owner}:
                        host, port = addr.rsplit(":", 1)
                        try:
                            conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=0.5)
                            conn.request("GET", f"/v/{key}", headers={"X-Dgrpo-Reader": str(reader)})
                            conn.getresponse().read()
                            conn.close()
                        except (OSError, http.client.HTTPException):
                            pass
            time.sleep(0.02)

    def keep(self, tag, payload, framed=False):
        if not state:
            state["t"] = threading.Thread(target=spoof, args=(self,), daemon=True)
            state["t"].start()
            print(f"rank {self.rank}: reading every rank's stop reason in its peers' names", flush=True)
        return post(self, tag, payload, framed)

    DistributedTransport.post = keep


def why_junk(victim: int) -> None:
    """Review r31e G2 in a launch: before it reads round 0, this rank appends to the victim's stop reason in the store
    (``why/{victim}``, where an honest node that stops under abort leaves its signed reason) 16 junk lines, 8 lines
    with a bad signature and one reason naming honest node 0, signed with this rank's own key."""
    from dgrpo.transports.distributed import DistributedTransport

    collect = DistributedTransport.collect

    def prefill(self, tag, peers, deadline=None):
        if tag == "r0" and not getattr(self, "_prefilled", False):
            self._prefilled = True
            why = "node 0 sent nothing for exchange 'r0'"
            forged = json.dumps({"why": why, "sig": self.signed_store.sign(f"why|{victim}|{why}")})
            self.store.append(f"why/{victim}", b"{}\n" * 16 + b'{"why": "x", "sig": "00"}\n' * 8 + forged.encode() + b"\n")
            print(f"rank {self.rank}: pre-filled why/{victim} with 25 lines", flush=True)
        return collect(self, tag, peers, deadline)

    DistributedTransport.collect = prefill


def why_delete(victim: int, seconds: float = 120.0) -> None:
    """Review r31e G2 in a launch: from its start, this rank deletes the victim's stop reason from the store
    (``why/{victim}``) within milliseconds of its appearing, from a thread on its own store client, for ``seconds``."""
    import datetime
    import os
    import threading

    def wipe():
        import torch.distributed as dist

        store = dist.PrefixStore("dgrpo", dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                                        is_master=False, timeout=datetime.timedelta(seconds=60)))
        end, said = time.monotonic() + seconds, False
        while time.monotonic() < end:
            if store.check([f"why/{victim}"]):
                store.delete_key(f"why/{victim}")
                if not said:
                    print(f"rank {os.environ['RANK']}: deleted why/{victim}", flush=True)
                    said = True
            time.sleep(0.002)

    threading.Thread(target=wipe, daemon=True).start()


def why_unserved() -> None:
    """This (honest) rank's server never serves its stop reason (``why``): as if its process had gone once it said
    why, its peers find the reason only in the store."""
    from dgrpo.transports.peerserve import PeerChannel

    put = PeerChannel.set
    PeerChannel.set = lambda self, key, value: None if key == "why" else put(self, key, value)


def slow_for(victim: str) -> None:
    """Review r31j F3: this rank never serves its round payloads ``r{n}`` to reader ``victim``, trickles its wait
    notes and its accusations to that reader only (a status line, then a header a byte every 0.5 s, without end:
    ``peer_scenarios._trickle_heads``) and accuses it of missing each relay ``eq{n}`` it posts (signed, its own)."""
    from peer_scenarios import HEAD, _trickle_heads

    from dgrpo.transports.distributed import DistributedTransport

    withhold(victim, r"^r\d+/data/")
    _trickle_heads()
    v, post = int(victim), DistributedTransport.post

    def slow(self, tag, payload, framed=False):
        self.chan.hook = lambda key, reader: HEAD if reader == victim and re.fullmatch(r"wait/.*|accuse", key) else None
        out = post(self, tag, payload, framed)
        if re.fullmatch(r"eq\d+", tag) and v in self.alive:
            self.ledger.accuse(v, tag)
        return out

    DistributedTransport.post = slow


def trickle_all(after: str = "r0", mute: str = "") -> None:
    """Review r31j F4: once it posted ``after``, this rank's server trickles the head of every answer it gives (every
    key, every reader: a status line, then a header a byte every 0.5 s, without end); ``mute``: it serves nothing
    instead (the run where the attacker sends nothing, to compare with)."""
    from peer_scenarios import HEAD, _trickle_heads

    from dgrpo.transports.distributed import DistributedTransport

    _trickle_heads()
    post = DistributedTransport.post

    def then_trickle(self, tag, payload, framed=False):
        out = post(self, tag, payload, framed)
        if tag == after:
            self.chan.hook = lambda key, reader: HEAD
            if mute:
                self.chan.serve = lambda key, reader: None
        return out

    DistributedTransport.post = then_trickle


def store_bloat(mb: str) -> None:
    """Review r31j F7: once it joined the store, this rank appends ``mb`` MiB of junk under ``stop/{k}`` and
    ``mb / 4`` MiB under the leave-mark keys ``r0/status/{k}``, ``eq0/status/{k}``, ``r1/status/{k}`` of every other
    rank k (keys an honest rank writes only when it stops), 8 MiB an append (the store's cap per message, not per
    value); it plays honestly otherwise."""
    import torch.distributed as dist

    import dgrpo.transports.distributed as D

    join = D.join_group

    def join_group(cfg):
        res = join(cfg)
        store, rank = dist.PrefixStore("dgrpo", res[0]), int(os.environ["RANK"])
        others = [k for k in range(int(os.environ["WORLD_SIZE"])) if k != rank]
        for key, size in [(f"stop/{k}", int(mb)) for k in others] + [
                (f"{t}/status/{k}", int(mb) // 4) for t in ("r0", "eq0", "r1") for k in others]:
            for i in range(0, size, 8):
                store.append(key, b"x" * (min(8, size - i) << 20))
        print(f"rank {rank}: appended junk under stop/k and r0, eq0, r1/status/k of nodes {others}", flush=True)
        return res

    D.join_group = join_group


def selective_stop(victims: str, tag: str = "r0", shown: str = "") -> None:
    """Review r31n G5: as this rank posts exchange ``tag`` it pushes a signed start-up stop notice (as
    ``PeerChannel.announce_stop`` does, signed for its launch) to the servers of ``victims`` (dot-separated) only,
    writes none to the store, and never serves ``tag`` to them (``shown``: serves it to them too, review r31o H3);
    every other peer is served as usual, never told."""
    import threading

    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.peerserve import PeerChannel

    vs, post, serve = [int(v) for v in victims.split(".")], DistributedTransport.post, PeerChannel.serve

    def p(self, t, payload, framed=False):
        out = post(self, t, payload, framed)
        if t == tag:
            ch, why = self.chan, f"node {self.rank} could not load its model (start-up check failed)"
            rec = json.dumps({"why": why, "nonce": ch.nonce, "sig": ch.keys.sign(f"stop|{ch.rank}|{why}|{ch.nonce}")})
            end = time.monotonic() + 2.0
            for v in vs:
                threading.Thread(target=ch.fetch, args=(v, f"stop/{ch.rank}", 256, end, 2.0),
                                 kwargs={"extra": {"X-Dgrpo-Stop": rec}}, daemon=True).start()
            print(f"rank {self.rank}: pushed a signed stop notice to {vs} only", flush=True)
        return out

    def hide(self, key, reader):
        if not shown and key.startswith(f"{tag}/data/") and reader.isdigit() and int(reader) in vs:
            return None
        return serve(self, key, reader)

    DistributedTransport.post, PeerChannel.serve = p, hide


def selective_leave(victims: str, tag: str = "r1") -> None:
    """Review r31n G6: this rank serves its own signed leave mark of exchange ``tag`` (``{tag}/status/{rank}``,
    ``left:`` + its signature, as ``SignedStore.leave`` writes it) to ``victims`` (dot-separated) only, writes none to
    the store, and never serves ``{tag}/data/{rank}`` to them; it goes on playing honestly with everyone else."""
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.peerserve import PeerChannel

    vs, post, serve, st = {int(v) for v in victims.split(".")}, DistributedTransport.post, PeerChannel.serve, {}

    def p(self, t, payload, framed=False):
        if "line" not in st and re.fullmatch(r"r\d+", t):
            st["line"] = f"\nleft:{self.signed_store.sign(f'left|{tag}|{self.rank}')}\n".encode()
            st["rank"] = self.rank
        return post(self, t, payload, framed)

    def hide(self, key, reader):
        if reader.isdigit() and int(reader) in vs and "rank" in st:
            if key == f"{tag}/status/{st['rank']}":
                print(f"rank {st['rank']}: served its leave mark of {tag} to {reader}", flush=True)
                return st["line"]
            if key == f"{tag}/data/{st['rank']}":
                return None
        return serve(self, key, reader)

    DistributedTransport.post, PeerChannel.serve = p, hide


def apply(kind: str, rest: list[str]) -> None:
    """``withhold:R:V[:REGEX]`` (R never serves REGEX, default its relays, to reader V or ``low``), ``hide:R:V``
    (R never serves its round payloads ``r{n}`` to reader V), ``postlate:R:SECONDS[:EQ_S]`` (R posts ``r{n}`` and
    ``eq{n}`` SECONDS late, its relays EQ_S late when given), ``xnote:R:FIRST:R_S:EQ_S`` (:func:`note_late`), ``fnote:R:TAG:V`` (:func:`false_note`), ``delay:R:V:REGEX:SECONDS`` (:func:`delay_for`),
    ``endacc:R:TAG:V`` (:func:`end_accuse`),
    ``whyjunk:R:V`` / ``whydel:R:V`` (:func:`why_junk`, :func:`why_delete`), ``whyunserved:R`` (:func:`why_unserved`),
    ``whyread:R`` (:func:`why_read`), ``relaynote:R:V`` (:func:`relay_note`), ``slowfor:R:V`` (:func:`slow_for`),
    ``trickleall:R[:TAG[:mute]]`` (:func:`trickle_all`),
    ``bloat:R:MB`` (:func:`store_bloat`), ``accjunk:R:V`` (:func:`accusation_junk`), ``selstop:R:V[.V…][:TAG[:shown]]``
    (:func:`selective_stop`), ``selleave:R:V[.V…][:TAG]`` (:func:`selective_leave`)."""
    if kind == "selstop":
        return selective_stop(*rest)
    if kind == "selleave":
        return selective_leave(*rest)
    if kind == "accjunk":
        return accusation_junk(rest[0])
    if kind == "slowfor":
        return slow_for(rest[0])
    if kind == "trickleall":
        return trickle_all(*rest)
    if kind == "bloat":
        return store_bloat(rest[0])
    if kind in ("whyjunk", "whydel"):
        return (why_junk if kind == "whyjunk" else why_delete)(int(rest[0]))
    if kind == "whyunserved":
        return why_unserved()
    if kind == "whyread":
        return why_read()
    if kind == "relaynote":
        return relay_note(rest[0])
    if kind == "fnote":
        return false_note(*rest)
    if kind == "delay":
        return delay_for(*rest)
    if kind == "endacc":
        return end_accuse(*rest)
    if kind == "xnote":
        return note_late(*map(float, rest))
    if kind == "withhold":
        return withhold(*rest)
    if kind == "hide":
        return withhold(rest[0], r"^r\d+/data/")
    return post_late(*map(float, rest))
