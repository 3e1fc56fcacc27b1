"""Fault scenarios a rank of a test swarm plays (:func:`apply_scenario`, run inside the rank before the CLI:
``distributed_helpers.launch``, ``rank_main.py`` under torchrun, ``hivemind_helpers``). Each patches the
transport, the recipe or the start-up of its own process only."""

from __future__ import annotations

import datetime
import json
import os
import time


def crafted_payload(transport, messages) -> bytes:
    """A compromised node's payload: two of its real messages, five bad ones signed with its own key
    and a non-object (8 in all: a node may send at most B·G messages a round)."""
    from dgrpo.policy.chat import encode_completion
    from dgrpo.swarm.validation import parse_message

    good = [m.to_dict() for m in messages[:2]]
    base = dict(good[0])
    tok = CRAFT["tokenizer"]
    def variant(i, **kw):
        return {**base, "index": 100 + i, **kw}
    text = "<think>2 + 2 = 4</think>"
    ids = encode_completion(tok, text)
    bad = [
        variant(0, text="<think>7 apples</think>", token_ids=ids),                       # not the decoding of its ids
        variant(1, text=text, token_ids=[*ids[:-1], len(tok) + 5, ids[-1]]),             # token id ≥ vocab size
        variant(2, text="a" * 10**5, token_ids=ids),  # 10^5 characters (within the key's byte cap: 4 × 4 slots of 53 kB)
        variant(3, node=0, text=text, token_ids=ids),                                    # claims node 0's id
        variant(4, text=text + "<|im_end|>", token_ids=encode_completion(tok, text + "<|im_end|>")),  # special text
    ]
    signer = CRAFT["protocol"].signers[transport.rank]
    bad = [signer.sign(parse_message(b)[0]).to_dict() for b in bad] + ["not an object"]
    return json.dumps({"messages": good + bad, "labels": ["honest"] * (len(good) + len(bad))}).encode()


CRAFT: dict = {}


def _keep_protocol() -> None:
    """Let a scenario sign with its own rank's key (what a compromised node holds)."""
    from dgrpo.training import build

    original = build.build_protocol

    def keep(*args, **kwargs):
        CRAFT["protocol"] = original(*args, **kwargs)
        return CRAFT["protocol"]

    build.build_protocol = keep


def _before_reading(tag: str, action) -> None:
    """Run ``action(transport)`` in this rank's main thread just before it reads its peers' payloads
    of exchange ``tag`` (a store client is not shared between threads)."""
    from dgrpo.transports import clocked
    from dgrpo.transports.distributed import DistributedTransport

    original, on_clock, fired = DistributedTransport.collect, clocked.collect, []

    def collect(self, tag_, peers, deadline=None):
        if tag_ == tag and not fired:
            fired.append(action(self))
        return original(self, tag_, peers, deadline)

    def collect_on_clock(t, tag_, *args, **kwargs):  # (the clocked rounds read through clocked.collect: task u31g)
        if tag_ == tag and not fired:
            fired.append(action(t))
        return on_clock(t, tag_, *args, **kwargs)

    DistributedTransport.collect = collect
    clocked.collect = collect_on_clock


def _forge(victim: int, replace: bool = False) -> None:
    """This rank serves, after its own round-0 frame, its own messages re-addressed to the victim (signed
    with its own key) and one unsigned message claiming the victim; ``replace`` (what the store allowed
    before peerserve): it also writes them over the victim's round-0 key in the store, which nobody reads."""
    import dataclasses

    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.framing import frame

    original, post = DistributedTransport.encode, DistributedTransport.post

    def encode(self, messages):
        if messages and messages[0].round == 0:
            signer = CRAFT["protocol"].signers[self.rank]
            forged = [signer.sign(dataclasses.replace(m, node=victim)) for m in messages]
            forged.append(dataclasses.replace(messages[0], node=victim, index=messages[0].index + 1, signature=None))
            self._extra = frame(json.dumps({"messages": [m.to_dict() for m in forged], "labels": ["honest"] * len(forged)}).encode())
            if replace:
                self.store.set(f"r0/data/{victim}", self._extra)
        return original(self, messages)

    def post_extra(self, tag, payload, framed=False):
        post(self, tag, payload, framed)
        if tag == "r0" and getattr(self, "_extra", None) and not replace:
            self.chan.append(f"r0/data/{self.rank}", self._extra)

    DistributedTransport.encode, DistributedTransport.post = encode, post_extra


def _equivocate() -> None:
    """This rank's server shows node 0 its round-0 messages and every other reader other validly signed
    texts for the same slots (it says who reads: the X-Dgrpo-Reader header)."""
    import dataclasses

    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.framing import frame

    original = DistributedTransport.encode

    def encode(self, messages):
        payload = original(self, messages)
        if messages and messages[0].round == 0:
            signer = CRAFT["protocol"].signers[self.rank]
            other = [signer.sign(dataclasses.replace(m, text=m.text + " 2 + 2 = 5")) for m in messages]
            second = frame(json.dumps({"messages": [m.to_dict() for m in other]}).encode())
            key = f"r0/data/{self.rank}"
            self.chan.hook = lambda k, reader: second if k == key and reader != "0" else None
        return payload

    DistributedTransport.encode = encode


def _served(t, owner: int, key: str, wait: float = 60.0) -> bytes | None:
    """``owner``'s value of ``key`` once its server serves it (polled, up to ``wait`` seconds)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        value, _ = t.chan.fetch(owner, key, 1 << 26, end)
        if value is not None:
            return value
        time.sleep(0.01)
    return None


def _respell(upper: bool = True) -> None:
    """In every message round this rank waits until its peers posted, reads their messages and serves, under
    its own key before its own frame, each of them with the signature in upper case (issue 31: the old copy
    check compared signature strings, so each counted as a second message for its honest signer's slot);
    ``upper=False`` (``forward:R``): verbatim, so a low rank's copies are read before their signers' own
    deliveries (review r31i F3: the signers were named ``copy``)."""
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.framing import frame, unframe

    original = DistributedTransport.post

    def post(self, tag, payload, framed=False):
        if framed and tag.startswith("r"):
            others = sorted(self.alive - {self.rank})
            msgs = [m for n in others for body in unframe(_served(self, n, f"{tag}/data/{n}") or b"")
                    for m in json.loads(body)["messages"]]
            respelled = [{**m, "signature": m["signature"].upper() if upper else m["signature"]}
                         for m in msgs if m.get("signature")]
            prefix = frame(json.dumps({"messages": respelled}).encode())
            self._frame = lambda p: prefix + frame(p)  # served before its own frame, from the start
        return original(self, tag, payload, framed)

    DistributedTransport.post = post


def _own_copies(copies: int) -> None:
    """In every message round this rank serves up to ``copies`` copies of its own signed messages (issue 31's flood:
    16,736 copies of the attacker's own messages cost each honest receiver 21 s a round): its payload's frame
    repeated, each a valid frame of its messages as it signed them (copies by content, not new messages), as many
    as its readers' byte cap for its share holds (a longer payload is cut off as ``oversize``: its server failed
    for the round, a case of its own)."""
    import re

    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.framing import frame

    original = DistributedTransport.post

    def post(self, tag, payload, framed=False):
        if not (framed and re.fullmatch(r"r\d+", tag)):
            return original(self, tag, payload, framed)
        per_frame, size = max(1, len(json.loads(payload)["messages"])), len(frame(payload))
        frames = max(1, min(copies // per_frame, self.caps.bytes // size))
        print(f"rank {self.rank}: serving {frames} copies of its {per_frame} messages in {tag} ({frames * size} bytes, "
              f"cap {self.caps.bytes})", flush=True)
        self._frame = lambda p: frame(p) * frames
        try:
            return original(self, tag, payload, framed)
        finally:
            del self._frame  # (its relays and records as usual)

    DistributedTransport.post = post


def _slow_reader(seconds: float, tag: str = "r0") -> None:
    """This (honest) rank reads its peers' payloads of exchange ``tag`` ``seconds`` late (a slow link)."""
    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.collect

    def collect(self, tag_, peers, deadline=None):
        if tag_ == tag:
            time.sleep(seconds)
        return original(self, tag_, peers, None if deadline is None else deadline + seconds)

    DistributedTransport.collect = collect


def _no_payload() -> None:
    """This rank never serves its round-0 payload."""
    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.post

    def post(self, tag, payload, framed=False):
        if tag == "r0":
            return None
        return original(self, tag, payload, framed)

    DistributedTransport.post = post


def _delete(victim: int) -> None:
    """This rank deletes the victim's round-0 keys from the store once the victim serves its payload
    (the store carried round data before peerserve; now the deletion must change nothing)."""
    def delete(t):
        _served(t, victim, f"r0/data/{victim}")
        [t.store.delete_key(key) for key in (f"r0/data/{victim}", f"r0/status/{victim}", f"addr/{victim}")]
        print(f"rank {t.rank}: deleted r0/data/{victim}", flush=True)

    _before_reading("r0", delete)


def _overwrite_startup(tag: str, victim: int, value: bytes) -> None:
    """This rank writes over the victim's value of start-up exchange ``tag`` in the store once the victim
    serves it (what the store carried before peerserve: now nobody reads it there)."""
    def overwrite(t):
        _served(t, victim, f"{tag}/data/{victim}")
        t.store.set(f"{tag}/data/{victim}", value)
        print(f"rank {t.rank}: overwrote {tag}/data/{victim}", flush=True)

    _before_reading(tag, overwrite)


def _accuse(victim: int) -> None:
    """This rank accuses the victim (signed, alone) of missing round 0 and marks its round-1 status failed."""
    _before_reading("r0", lambda t: (t.ledger.accuse(victim, "r0"), t.store.compare_set(f"r1/status/{victim}", "", "failed")))


def apply_scenario(scenario: str, rank: int, args: list[str]) -> None:
    """``craft:R`` (rank R sends crafted JSON), ``die:R:ROUND`` (rank R exits hard at ROUND),
    ``stall:R:ROUND:SECONDS`` (rank R sleeps at ROUND), ``forge:R:V`` (rank R serves messages claiming V
    after its own), ``overwrite:R:V`` (rank R writes them over V's store key), ``equivocate:R`` (rank R's server shows node 0
    other messages than the other readers), ``slowread:R:SECONDS[:TAG]``, ``nopayload:R`` (R never serves round 0),
    ``delete:R:V`` (R deletes V's round-0 store keys once V serves), ``accuse:R:V`` (R alone accuses V),
    ``rename:R`` / ``rekey:R:V`` (R overwrites node 0's run name / V's public key, in its address record, in the store),
    ``late:R:SECONDS`` (R starts late), ``store:R:MODE:V`` / ``serve:R:MODE`` / ``addr:R:V`` / ``addrreplay:R:V`` / ``connflood:R:V`` / ``startjunk:R:V[:wipe]`` / ``addrcycle:R:V`` / ``addrwipe:R`` / ``addrstall:R:V`` / ``claimjam:R:N`` (store_scenarios, peer_scenarios), ``respell:R`` (R re-sends its peers' messages with upper-case
    signatures; ``forward:R`` verbatim), ``copies:R:N`` (R serves up to N copies of its own signed messages each round, within its byte cap), ``withhold:R:V`` / ``hide:R:V`` / ``postlate:R:SECONDS`` / ``xnote:R:...`` / ``fnote:R:TAG:V`` / ``delay:R:V:REGEX:S`` / ``endacc:R:TAG:V`` / ``whyjunk:R:V`` / ``whydel:R:V`` /
    ``whyunserved:R`` / ``whyread:R`` / ``relaynote:R:V`` / ``slowfor:R:V`` / ``trickleall:R`` / ``bloat:R:MB`` / ``accjunk:R:V`` / ``selstop:R:V[.V][:TAG]`` / ``selleave:R:V[.V][:TAG]`` (round_scenarios), ``sticky:R:WHOM`` / ``afternote:R:…`` / ``accat:R:TAG:V`` / ``noend:R:REGEX`` / ``skipread:R:V[:FIRST]`` / ``serveat:R:READERS:REGEX:S[:FIRST]`` (note_scenarios), ``clockserve:R:READERS:REGEX:OFFSET`` / ``bigequiv:R:READER:ROUND`` / ``roundest:R:SECONDS`` (clock_scenarios), ``rec:R:MODE+MODE…`` (record_scenarios: R's round records, by round), ``oversize:R[:ROUND]`` / ``trickle:R[:ROUND]`` (unserved_scenarios), ``propose:R:NAME`` (R proposes NAME as the
    run name), ``outdir:R:PATH`` (R's out_dir), ``arg:R:OVERRIDE`` (R alone gets OVERRIDE), ``startsplit:R:V`` / ``twoview:R:V`` / ``tworole:R:V`` / ``tworeadies:R:V:MODE`` / ``serveother:R:V:KEY:VALUE[:signed]``, ``viewonly:R:READERS:SLOW:SLOW_S``, ``twolaunch:R:VICTIMS[:VIEWS]`` / ``joinlate:R:SECONDS[:before]`` (startup_scenarios); several scenarios are joined
    with ``,``."""
    if "," in scenario:
        for one in scenario.split(","):
            apply_scenario(one, rank, args)
        return
    if not scenario:
        return
    kind, who, *rest = scenario.split(":")
    if int(who) != rank:
        return
    from dgrpo.recipes import horizontal
    from dgrpo.transports.distributed import DistributedTransport

    _keep_protocol()
    if kind in ("store", "serve", "addr", "addrreplay", "connflood", "checkin", "slowstart", "startjunk",
                "addrcycle", "addrwipe", "addrstall", "claimjam"):
        from peer_scenarios import (address_attack, address_cycle, address_replay, connection_flood, serve_attack,
                                    startup_junk)
        from store_scenarios import address_stall, address_wipe, checkin_attack, claim_jam, slow_start, store_attack

        return {"store": lambda m, v: store_attack(m, int(v)), "serve": serve_attack, "addr": address_attack,
                "addrreplay": address_replay, "connflood": connection_flood, "checkin": checkin_attack,
                "slowstart": slow_start, "startjunk": startup_junk, "addrcycle": address_cycle,
                "addrwipe": address_wipe, "addrstall": lambda *r: address_stall(args, *r),
                "claimjam": claim_jam}[kind](*rest)
    if kind in ("startsplit", "twoview", "tworole", "tworeadies", "serveother", "viewonly", "twolaunch", "joinlate"):
        from startup_scenarios import apply as startup_attack

        return startup_attack(kind, rest)
    if kind in ("withhold", "hide", "postlate", "xnote", "fnote", "delay", "endacc", "whyjunk", "whydel", "whyunserved", "whyread", "relaynote",
                "slowfor", "trickleall", "bloat", "accjunk", "selstop", "selleave"):
        from round_scenarios import apply as round_attack

        return round_attack(kind, rest)
    if kind in ("oversize", "trickle"):
        from unserved_scenarios import apply as unserved_attack

        return unserved_attack(kind, rest)
    if kind in ("clockserve", "bigequiv", "roundest"):
        from clock_scenarios import apply as clock_attack

        return clock_attack(kind, rest)
    if kind in ("sticky", "afternote", "accat", "noend", "skipread", "serveat"):
        from note_scenarios import apply as note_attack

        return note_attack(kind, rest)
    if kind == "propose":  # propose:R:NAME: R proposes NAME as the run name (agree("name") takes the lowest node's)
        from dgrpo.training import build

        print(f"rank {rank}: proposing the run name {rest[0]!r}", flush=True)
        build.run_name = lambda cfg: rest[0]
        return
    if kind == "arg":  # arg:R:OVERRIDE: R alone is given OVERRIDE (a config override only some ranks got)
        args.append(":".join(rest))
        return
    if kind == "outdir":  # outdir:R:PATH: R runs with out_dir=PATH (machines with different disks)
        args[:] = [a for a in args if not a.startswith("out_dir=")] + [f"out_dir={rest[0]}"]
        return
    if kind == "rec":  # rec:R:MODE+MODE+… (record_scenarios: its round records, by round)
        from record_scenarios import post_bad_records

        return post_bad_records(rest[0].split("+"))
    if kind in ("forge", "overwrite"):
        return _forge(int(rest[0]), replace=kind == "overwrite")
    if kind == "equivocate":
        return _equivocate()
    if kind in ("respell", "forward"):
        return _respell(upper=kind == "respell")
    if kind == "copies":  # copies:R:N: R serves N copies of its own signed messages each round
        return _own_copies(int(rest[0]))
    if kind == "slowread":
        return _slow_reader(float(rest[0]), *rest[1:])
    if kind == "nopayload":
        return _no_payload()
    if kind == "delete":
        return _delete(int(rest[0]))
    if kind == "accuse":
        return _accuse(int(rest[0]))
    if kind == "rename":
        return _overwrite_startup("name", 0, b"forged-run-name")
    if kind == "rekey":  # (the keys travel in the address records since review r31h F6: peer_scenarios)
        from peer_scenarios import address_rekey

        return address_rekey(*rest)
    if kind == "late":  # at least SECONDS late, and after the others gave up on it (however slowly they started)
        print(f"rank {rank}: starting {rest[0]}s late", flush=True)
        time.sleep(float(rest[0]))
        import torch.distributed as dist

        from dgrpo.transports.checkin import vote_key  # (every other rank's view: a quorum gave up on it)
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=60))
        store.wait([vote_key(k) for k in range(int(os.environ["WORLD_SIZE"])) if k != rank])
        return
    if kind == "craft":
        original = DistributedTransport.encode

        def encode(self, messages):
            if messages and messages[0].round == 0:
                import transformers

                model = next(a.split("=", 1)[1] for a in args if a.startswith("model.name="))
                CRAFT["tokenizer"] = transformers.AutoTokenizer.from_pretrained(model)
                return crafted_payload(self, messages)
            return original(self, messages)

        DistributedTransport.encode = encode
        return
    at = int(rest[0])
    one_round = horizontal.one_round

    def faulty(run, round_idx):
        if round_idx == at:
            if kind == "die":
                print(f"rank {rank}: dying at round {round_idx}", flush=True)
                time.sleep(1.0)  # (its server serves the last relay a moment longer: its peers may still be reading it)
                os._exit(1)
            print(f"rank {rank}: stalling {rest[1]}s at round {round_idx}", flush=True)
            time.sleep(float(rest[1]))
        return one_round(run, round_idx)

    horizontal.one_round = faulty
