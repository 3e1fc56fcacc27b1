"""Round-record attacks a node of a test swarm plays, over torch.distributed or hivemind (review r31f H7, H2;
dispatched by ``rank_scenarios.apply_scenario`` as ``rec:R:MODES``). The node runs the honest code; only what it
posts as its round record ``rec{r}`` changes. It declares itself honest, so in a heterogeneous swarm it reports."""

from __future__ import annotations

import json
import re


def bad_record(mode: str, honest: bytes) -> bytes | None:
    """What is posted instead of the honest record ``honest`` (None: nothing is posted).

    ``list``: ``[]``; ``text``: bytes that are not JSON; ``lie``: the honest record with an evaluation accuracy no
    whole number of its completions can give (1/3 of its ``eval/n``), or one where none is due; ``null``: the honest
    record with ``"eval/accuracy": null`` (review r31g J1); ``none``: nothing;
    ``honest``: the record as it was."""
    if mode == "list":
        return b"[]"
    if mode == "text":
        return b"not json {"
    if mode in ("lie", "null"):
        rec = json.loads(honest)
        rec["eval/accuracy"] = 1 / 3 if mode == "lie" else None
        return json.dumps(rec).encode()
    return None if mode == "none" else honest


def post_bad_records(modes: list[str]) -> None:
    """This node posts ``bad_record(modes[r])`` as its record of round r (the last mode for later rounds), on either
    transport."""
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
            return None if body is None else _post(self, tag, body, *args, **kwargs)
        cls.post = patched
