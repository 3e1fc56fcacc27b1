"""Round-record attacks a node of a test swarm plays, over torch.distributed or hivemind (review r31f H7, H2;
dispatched by ``rank_scenarios.apply_scenario`` as ``rec:R:MODES``). The node runs the honest code; only what it
posts as its round record ``rec{r}`` changes. It declares itself honest, so in a heterogeneous swarm it reports."""

from __future__ import annotations

import json
import os
import re
import time


def bad_record(mode: str, honest: bytes) -> bytes | None:
    """What is posted instead of the honest record ``honest`` (None: nothing is posted).

    ``list``: ``[]``; ``text``: bytes that are not JSON; ``lie``: the honest record with an evaluation accuracy no
    whole number of its completions can give (1/3 of its ``eval/n``), or one where none is due; ``null``: the honest
    record with ``"eval/accuracy": null`` (review r31g J1); ``none`` or ``quit``: nothing (``quit``: the node then
    leaves, :func:`post_bad_records`); ``late{S}``: the honest record, ``S`` seconds late (:func:`post_bad_records`);
    ``honest``: the record as it was."""
    if mode == "list":
        return b"[]"
    if mode == "text":
        return b"not json {"
    if mode in ("lie", "null"):
        rec = json.loads(honest)
        rec["eval/accuracy"] = 1 / 3 if mode == "lie" else None
        return json.dumps(rec).encode()
    return None if mode in ("none", "quit") else honest


def post_bad_records(modes: list[str]) -> None:
    """This node posts ``bad_record(modes[r])`` as its record of round r (the last mode for later rounds), on either
    transport; ``late{S}`` sleeps ``S`` s first (so the node also enters its next round that late: review r31g Z5l),
    ``quit`` exits the process 1 s after posting nothing (its server served its last relay that long: a node gone
    after its relay, the reference of a late one)."""
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.hivemind import HivemindTransport

    for cls in (DistributedTransport, HivemindTransport):
        def patched(self, tag, payload, *args, _post=cls.post, **kwargs):
            m = re.fullmatch(r"rec(\d+)", tag)
            if m is None:
                return _post(self, tag, payload, *args, **kwargs)
            mode = modes[min(int(m.group(1)), len(modes) - 1)]
            body = bad_record(mode, payload)
            print(f"ATTACKER node {self.rank}: {tag}: {mode} ({None if body is None else body[:40]!r})", flush=True)
            if mode.startswith("late"):
                time.sleep(float(mode[4:]))
            if mode == "quit":
                time.sleep(1.0)
                os._exit(0)
            return None if body is None else _post(self, tag, body, *args, **kwargs)
        cls.post = patched
