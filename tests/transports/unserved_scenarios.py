"""A rank whose server answers its round payloads and relays, and nothing else, so that they never come whole (review
r31o H5; dispatched by ``rank_scenarios.apply_scenario``): ``oversize:R[:ROUND]`` serves each ``r{n}/data/R`` and
``eq{n}/data/R`` from round ROUND (default 1) on as 8 MiB of zeros with its own Content-Length (over every reader's
cap); ``trickle:R[:ROUND]`` streams them a byte every 0.9 s (under a reader's 1 s recv silence, past its read budget).
It reads its peers and accuses as an honest rank does."""

from __future__ import annotations

import re
import time

_KEY = re.compile(r"(?:r|eq)(\d+)/data/(\d+)")


def _trickle():
    while True:
        yield b"{"
        time.sleep(0.9)


def apply(kind: str, rest: list[str]) -> None:
    from dgrpo.transports.distributed import DistributedTransport

    first, post = int(rest[0]) if rest else 1, DistributedTransport.post
    big = b"\0" * (8 << 20)

    def hook_of(rank):
        def hook(key, reader):
            m = _KEY.fullmatch(key)
            if m is None or int(m.group(2)) != rank or int(m.group(1)) < first:
                return None
            return big if kind == "oversize" else _trickle()
        return hook

    def bad_post(self, tag, payload, framed=False):
        self.chan.hook = hook_of(self.rank)
        return post(self, tag, payload, framed)

    DistributedTransport.post = bad_post
    print(f"rank serving its round payloads and relays {kind} from round {first}", flush=True)
