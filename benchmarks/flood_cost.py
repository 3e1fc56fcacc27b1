"""Worst-case flood cost per round for one honest receiver (issue 31, must-have 3).

What one honest rank of a 4-node torch.distributed swarm spends on the attacker's store key (node 3) in one
round, measured in this process (a HashStore transport, the tiny test model, B=2 × G=4, 2 slots a node):

* ``frames``: the quadratic-frame payload, ``DGRPO1ffffffff`` repeated to SIZE MiB: ``transport.decode``.
* ``copies``: the attacker's 2 signed messages repeated 16,384 times (about 8 MiB: frames of B·G=8
  messages each, what the issue's attacker sent): ``transport.decode`` then ``swarm.receive`` of the honest
  6 messages and everything decoded (signature checks, the protocol, turning messages into rollouts).

Run it against any source tree (before/after: the same script, PYTHONPATH=<tree>/src):

    PYTHONPATH=src python benchmarks/flood_cost.py --frames-mib 0.125 0.5 1 2 8 --copies 16384 21384
    PYTHONPATH=src python benchmarks/flood_cost.py --no-caps --frames-mib 1 8 --scan-mib 1 8 --copies 16384 21384
    PYTHONPATH=src python benchmarks/flood_cost.py --channel --at-cap --frames-mib 0.125 1 8 --copies 16384 21384
    PYTHONPATH=/work/main/src python benchmarks/flood_cost.py --frames-mib 0.125 0.5 1 2 --scan-mib 0.125 0.5 \
        --copies 16384 21384

Prints one JSON line per measurement: {"case", "mib", "seconds", ...}. ``unframe_*``: the framing alone
(``--scan-mib``), on the issue's payload and on headers whose lengths fit (each claims the rest).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


CAPS = True  # --no-caps: the transport's old unbounded limits (what unframe and receive alone cost)
CHANNEL = False  # --channel: the payload is served by node 3's own server (peerserve) and fetched as collect does


def through_channel(t, payload: bytes) -> tuple[bytes | None, dict]:
    """``payload`` served by node 3's own server (transports/peerserve.py, loopback) and fetched by ``t`` as
    ``collect`` does (its byte cap for a round's payload, the 2 s budget): (bytes or None, timing fields)."""
    from dgrpo.transports.peerserve import PeerChannel

    owner = PeerChannel(3, host="127.0.0.1")
    owner.set("r0/data/3", payload)
    t.chan.addrs[3] = owner.address
    start = time.perf_counter()
    got, problem = t.chan.fetch(3, "r0/data/3", t._cap("r0"), time.monotonic() + 30)
    fetch_s = time.perf_counter() - start
    owner.close()
    return got, {"fetch_s": round(fetch_s, 4), "cap_bytes": t._cap("r0"), "fetched": got is not None,
                 **({"problem": problem.split(":")[0]} if problem else {})}


def transport():
    import torch.distributed as dist

    from dgrpo.transports.distributed import DistributedTransport

    t = DistributedTransport(dist.HashStore(), 0, 4, honest=[0, 1, 2], timeout_s=1, max_messages=8)
    from dgrpo.transports import framing

    if CAPS and hasattr(framing, "KeyCaps"):  # the per-key caps of a tree that has them (2 slots a node, max_new_tokens=6)
        from dgrpo.swarm.validation import Limits

        t.caps = framing.KeyCaps.of(slots=2, limits=Limits.for_completions(6))
    return t


def payload_of(mib: float, pattern: str) -> bytes:
    """``ffffffff``: the issue's payload; ``fits``: each header claims exactly the rest of the payload and its
    body starts with ``{`` (the last byte is ``}``), so every header is a candidate the JSON scan must test."""
    if pattern == "ffffffff":
        return b"DGRPO1ffffffff" * int(mib * 2**20 / 14)
    n = int(mib * 2**20 / 15)
    return b"".join(b"DGRPO1" + f"{(n - i) * 15 - 13:08x}".encode() + b"{" for i in range(n)) + b"}"


def frames_case(mib: float, pattern: str = "ffffffff") -> dict:
    payload = payload_of(mib, pattern)
    t = transport()
    extra = {}
    if CHANNEL:
        payload, extra = through_channel(t, payload)
    start = time.perf_counter()
    got = t.decode(3, payload) if payload is not None else []
    decode_s = time.perf_counter() - start
    return {"case": f"frames_{pattern}", "mib": mib, "seconds": round(decode_s + extra.get("fetch_s", 0), 4),
            **({"decode_s": round(decode_s, 4), **extra} if CHANNEL else {}), "messages": len(got),
            "refusals": len(t.rejected)}


def scan_case(mib: float, pattern: str) -> dict:
    """``unframe`` alone on :func:`payload_of`."""
    from dgrpo.transports.framing import unframe

    payload = payload_of(mib, pattern)
    start = time.perf_counter()
    unframe(payload)
    return {"case": f"unframe_{pattern}", "mib": mib, "seconds": round(time.perf_counter() - start, 4)}


def copies_case(copies: int) -> dict:
    from conftest import build_model, build_tokenizer

    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams
    from dgrpo.swarm.identity import Roster, Signer, SignatureVerifier, generate_keys, run_context
    from dgrpo.swarm.protocol import BanList, Protocol, ProtocolConfig, Schedule
    from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots
    from dgrpo.swarm.swarm import Swarm
    from dgrpo.swarm.validation import Limits
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.transports.framing import frame

    tokenizer = build_tokenizer()
    task = ArithmeticTask(seed=0, n_train=10, n_val=2, few_shot=0)
    keys, ctx = generate_keys(4), run_context("flood", "fp")
    pc = ProtocolConfig(ban_after=2)
    protocol = Protocol(pc, Schedule("horizontal", 4, 2, 4, 3, task.train), 6,
                        {n: Signer(n, k, ctx) for n, k in keys.items()}, SignatureVerifier(Roster.of(keys), ctx), BanList(2))
    policy = Policy("tiny", build_model(len(tokenizer)), tokenizer, SamplingParams(top_k=10, max_new_tokens=6))
    swarm = Swarm(task, {n: policy for n in range(4)}, {}, {}, {}, {}, 3, 4, Limits.for_completions(6),
                  "horizontal", protocol)
    prompts = horizontal_prompts(task.train, 2, 3, 0)
    out = swarm.write({k: horizontal_slots(prompts, 4, 4, k) for k in range(4)}, 0)
    t = transport()
    body = json.loads(t.encode(out[3]))
    per_frame = 4  # 2 messages × 4 = B·G = 8 messages a frame (the old per-frame cap)
    one = frame(json.dumps({"messages": body["messages"] * per_frame, "labels": body["labels"] * per_frame}).encode())
    payload = one * (copies // (2 * per_frame))
    honest = [m for n in (0, 1, 2) for m in out[n]]
    mib, extra = round(len(payload) / 2**20, 2), {}
    if CHANNEL:
        payload, extra = through_channel(t, payload)
    start = time.perf_counter()
    decoded = t.decode(3, payload) if payload is not None else []
    mid = time.perf_counter()
    received = swarm.receive(policy, [*honest, *decoded], 0)
    end = time.perf_counter()
    return {"case": "copies", "copies": copies, "mib": mib, **extra,
            "decode_s": round(mid - start, 4), "receive_s": round(end - mid, 4),
            "seconds": round(end - start + extra.get("fetch_s", 0), 4),
            "decoded": len(decoded), "accepted": len(received.rollouts), "refused": len(received.invalid),
            "transport_refusals": len(t.rejected),
            "verifications": getattr(protocol.verifier, "verified", None)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames-mib", type=float, nargs="*", default=[0.125, 1, 8])
    ap.add_argument("--copies", type=int, nargs="*", default=[16384])
    ap.add_argument("--scan-mib", type=float, nargs="*", default=[], help="unframe alone on both patterns")
    ap.add_argument("--no-caps", action="store_true", help="leave the per-key caps off (decode and receive alone)")
    ap.add_argument("--channel", action="store_true", help="serve each payload from node 3's own server (peerserve) "
                    "and fetch it with the reader's byte cap and 2 s budget before decoding (seconds include the fetch)")
    ap.add_argument("--at-cap", action="store_true", help="also each frames pattern at exactly the byte cap of a key")
    args = ap.parse_args(argv)
    global CAPS, CHANNEL
    CAPS, CHANNEL = not args.no_caps, args.channel
    if args.at_cap:
        args.frames_mib = [*args.frames_mib, transport()._cap("r0") / 2**20]
    for mib in args.scan_mib:
        for pattern in ("ffffffff", "fits"):
            print(json.dumps(scan_case(mib, pattern)), flush=True)
    for mib in args.frames_mib:
        for pattern in ("ffffffff", "fits"):
            print(json.dumps(frames_case(mib, pattern)), flush=True)
    for n in args.copies:
        print(json.dumps(copies_case(n)), flush=True)


if __name__ == "__main__":
    main()
