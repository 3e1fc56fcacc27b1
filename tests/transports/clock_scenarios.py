"""Attacks on clocked rounds (``swarm.protocol.schedule=clock``, task h31v; dispatched by
``rank_scenarios.apply_scenario``). Each patches only the attacking rank's own process."""

from __future__ import annotations

import re
import time


def clock_serve(readers: str, pattern: str, offset: str) -> None:
    """Keys matching ``pattern`` (a round payload ``r{n}/…``) are served to ``readers`` (ranks joined by ``.``) only
    from ``A_n + offset`` on (``A_n``: the end of direct reads of round n on the agreed clock; ``offset`` < 0: just
    before it, a race the victims may win or lose); other readers as usual."""
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.peerserve import PeerChannel

    pat, rs, st = re.compile(pattern), set(readers.split(".")), {}
    post, serve = DistributedTransport.post, PeerChannel.serve

    def keep(self, tag, payload, framed=False):
        st["t"] = self
        return post(self, tag, payload, framed)

    def at(self, key, reader):
        m, t = re.match(r"^r(\d+)/", key), st.get("t")
        if not (pat.match(key) and reader in rs and m and t is not None and t.clock is not None):
            return serve(self, key, reader)
        live = serve(self, key, reader)
        st.update({"v:" + key: live} if live is not None else {})  # (kept: its own later rounds delete the key)
        return live or st.get("v:" + key) if time.time() >= t.clock.direct_until(int(m.group(1))) + float(offset) else None

    DistributedTransport.post, PeerChannel.serve = keep, at


def big_equivocation(reader: str, round_idx: str) -> None:
    """In round ``round_idx``, this rank's server shows ``reader`` alone another validly signed text for its first
    slot: 2-byte characters up to its round payload's byte cap (3 × that in a relay: no honest relay carries it;
    review h31r). The other readers get its messages as usual, so the reader also meets them through their relays."""
    import dataclasses
    import json

    from rank_scenarios import CRAFT

    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.framing import frame

    original = DistributedTransport.encode

    def encode(self, messages):
        payload = original(self, messages)
        if messages and messages[0].round == int(round_idx):
            signer = CRAFT["protocol"].signers[self.rank]
            rest = [m.to_dict() for m in messages[1:]]
            room = self.caps.bytes - len(json.dumps(rest)) - 4096
            big = signer.sign(dataclasses.replace(messages[0], text="\u00e9" * (room // 2)))
            other = frame(json.dumps({"messages": [big.to_dict(), *rest]}, ensure_ascii=False).encode())
            key = f"r{round_idx}/data/{self.rank}"
            print(f"rank {self.rank}: serving node {reader} alone {len(other)} bytes under {key}", flush=True)
            self.chan.hook = lambda k, who: other if k == key and who == reader else None
        return payload

    DistributedTransport.encode = encode


def round_estimate(seconds: str) -> None:
    """``round_s: auto``: this rank proposes ``seconds`` as its round_s (its start-up timing left out; task h31h)."""
    from dgrpo.training import build

    print(f"proposing round_s={seconds}", flush=True)
    build.auto_round_s = lambda cfg, swarm, task: float(seconds)


def apply(kind: str, rest: list[str]) -> None:
    """``clockserve:R:READERS:REGEX:OFFSET`` (:func:`clock_serve`), ``bigequiv:R:READER:ROUND``
    (:func:`big_equivocation`), ``roundest:R:SECONDS`` (:func:`round_estimate`)."""
    return {"clockserve": clock_serve, "bigequiv": big_equivocation, "roundest": round_estimate}[kind](*rest)
