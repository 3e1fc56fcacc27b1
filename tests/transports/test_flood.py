"""Issue 31, must-have 3: linear work per byte and bounded work per peer. What a reader spends is asserted on
counted quantities (characters its JSON scans examine, messages taken, Ed25519 verifications), never on wall
time; the timings are `benchmarks/flood_cost.py` (BENCHMARKS.md)."""

import json
import re

import pytest
import torch.distributed as dist

from dgrpo.swarm.validation import Limits
from dgrpo.transports.distributed import DistributedTransport
from dgrpo.transports.framing import CAP_FACTOR, KeyCaps, capped, frame, scan, unframe
from dgrpo.types import Message

MIB = 2**20
MSG = Message(3, 0, "p", 0, "hi", (1, 2), 7, "tok", "ctx", "ab" * 64)


def _transport(slots=2):
    t = DistributedTransport(dist.HashStore(), 0, 4, honest=[0, 1, 2], timeout_s=0.1, max_messages=8)
    t.caps = KeyCaps.of(slots, Limits.for_completions(6))
    return t


@pytest.mark.parametrize("mib", [1, 8])
def test_the_quadratic_frame_payload_is_linear(mib):
    """The issue's payload: ``DGRPO1ffffffff`` repeated (each header claims 4 GiB). No candidate is scanned."""
    data = b"DGRPO1ffffffff" * (mib * MIB // 14)
    assert scan(data) == ([], 0, False, 0)


@pytest.mark.parametrize("mib", [1, 8])
def test_headers_whose_lengths_fit_cost_a_bounded_scan_each(mib):
    """Every header claims exactly the rest of the payload, each body starts with ``{`` and the last byte is ``}``:
    the old code copied the rest at each header and parsed it; the scan now stops at the first byte that is not
    JSON (2 characters a header)."""
    n = mib * MIB // 15
    data = b"".join(b"DGRPO1" + f"{(n - i) * 15 - 13:08x}".encode() + b"{" for i in range(n)) + b"}"
    frames, work, *_ = scan(data)
    assert frames == [b"{}"] and n <= work <= 2 * n  # (each scanned: the bodies look like { ... }; the last is {})


def _overlapping(headers: int, size: int) -> bytes:
    """Headers inside a JSON string, each claiming the rest, whose text stays valid JSON for the scan of the frame
    around it and for its own (``,":":","`` repeated parses as a dict's keys and values in either phase)."""
    filler = b',":":","' * (size // 8 // headers)
    data = bytearray(b"DGRPO1LLLLLLLL" + b'{"x":"' + (b'DGRPO1LLLLLLLL{"' + filler) * headers + b'"}')
    pos = data.find(b"DGRPO1")
    while pos >= 0:  # every header claims exactly the bytes to the end (which is a `}`)
        data[pos + 6:pos + 14] = b"%08x" % (len(data) - pos - 14)
        pos = data.find(b"DGRPO1", pos + 1)
    return bytes(data)


@pytest.mark.parametrize("headers", [1, 2, 8, 64])
def test_overlapping_scans_that_stay_valid_are_still_linear(headers):
    """Two scans can cover one byte (one in a string, one outside); a third header kills one of them."""
    data = _overlapping(headers, MIB)
    frames, work, *_ = scan(data)
    assert frames == [] and len(data) <= work <= 2 * len(data)  # (the overlap is real: more than one pass)


def test_frames_are_still_found_around_and_inside_junk():
    a, b = b'{"messages": [1]}', b'{"messages": [2]}'
    assert unframe(frame(a) + frame(b)) == [a, b]
    assert unframe(b"DGRPO1000000AB" + frame(a)) == [a]  # a length in upper-case hex is no header
    assert unframe(frame(a) + frame(b), max_frames=1) == [a]
    assert unframe(frame(b'{"a": "\xff"}')) == [b'{"a": "\xff"}']  # not UTF-8: the reader's parse refuses it
    t = _transport()
    assert t.decode(3, frame(b'{"messages": "\xff"}')) == [] and t.rejected[-1][1].startswith("schema:")


def test_bytes_outside_every_frame_are_one_junk_refusal_and_frames_inside_frames_count_once():
    a, caps = b'{"messages": []}', KeyCaps(8, 8, 1 << 20)
    assert capped(frame(a) + frame(a), caps) == ([{"messages": []}] * 2, [])  # an honest payload is its frames
    bodies, reasons = capped(b"x" * 7 + frame(a) + b"yz", caps)  # 7 + 2 bytes of junk around one frame
    assert bodies == [{"messages": []}] and reasons == ["junk: 9 bytes outside every frame under one key; skipped"]
    outer = b'{"messages": [], "x": "' + frame(b"{}") + b'"}'  # a frame inside another's string
    found = scan(frame(outer))  # two frames, their bytes covered once
    assert found.frames == [outer, b"{}"] and found.covered == len(frame(outer))
    assert not any(r.startswith("junk") for r in capped(frame(outer), caps)[1])
    t = _transport()
    t.decode(3, b"\x00" * 100 + frame(t.encode([MSG])))
    assert t.rejected == [(3, "junk: 100 bytes outside every frame under one key; skipped")]


def test_key_caps_come_from_the_share():
    limits = Limits.for_completions(6)  # 256 tokens, 8192 characters
    caps = KeyCaps.of(2, limits)
    per_message = 6 * 8192 + 12 * 256 + 1024
    assert caps == KeyCaps(8, 8, 8 * per_message) and CAP_FACTOR == 4
    with pytest.raises(ValueError, match="slots"):
        KeyCaps.of(0, limits)


def test_sixteen_thousand_copies_are_cut_at_the_key_and_refused_once_per_cap():
    body = json.dumps({"messages": [MSG.to_dict()] * 8, "labels": ["honest"] * 8}).encode()
    payload = frame(body) * 2048  # 16,384 copies
    t = _transport()
    got = t.decode(3, payload)
    assert len(got) == 8  # 4 × 2 slots
    reasons = [r for _, r in t.rejected]
    assert sum(r.startswith("flood: ") for r in reasons) == 3 and len(reasons) == 3  # bytes, frames, messages
    assert {k for k, _ in t.rejected} == {3} and set(t.carriers.values()) == {3}


def test_an_honest_payload_is_taken_whole():
    t = _transport()
    payload = frame(t.encode([MSG, MSG]))
    assert t.decode(1, payload) == [MSG, MSG] and t.rejected == []
    bodies, reasons = capped(payload, t.caps)
    assert reasons == [] and len(bodies) == 1


def test_a_key_full_of_candidate_headers_is_read_only_up_to_the_header_cap():
    n = MIB // 15
    data = b"".join(b"DGRPO1" + f"{(n - i) * 15 - 13:08x}".encode() + b"{" for i in range(n)) + b"}"
    caps = KeyCaps(8, 8, 2 * len(data))
    found = scan(data, caps.frames + 1, 16 * caps.frames)
    assert found.stopped and found.frames == [] and found.work <= 2 * 16 * caps.frames
    bodies, reasons = capped(frame(b'{"messages": []}') + data, caps)  # the owner's frame first: still read
    assert bodies == [{"messages": []}] and reasons == ["flood: more than 128 frame headers under one key; the rest "
                                                        "are not read"]


def test_the_8_mib_quadratic_payload_is_cut_and_refused_once():
    t = _transport()
    assert t.decode(3, b"DGRPO1ffffffff" * (8 * MIB // 14)) == []
    assert [r.split(":")[0] for _, r in t.rejected] == ["flood", "schema"]


# ---------------------------------------------------------------------- a whole run: 4 ranks, node 3 floods copies
COMMON = ["threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=2", "eval.n_prompts=2",
          "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.unsafe_key_exchange=true",
          "swarm.prompts_per_round=2", "swarm.nodes=4", "swarm.malicious=[3]", "attack.kind=injection",
          "attack.poisoned_per_group=1", "rounds=2", "swarm.protocol.ban_after=2", "swarm.timeout_s=30"]


@pytest.mark.slow
def test_four_ranks_sixteen_thousand_copies_of_the_attackers_own_messages_leave_the_clean_runs_metrics(
        tmp_path, tiny_model_dir):
    """Issue 31's flood over torch.distributed (review L1): node 3 serves copies of its own 2 signed messages, as
    many as its readers' byte cap for its share holds (~770 copies in ~385 frames; 16,384 would be cut off as
    oversize, its server failed for the round: `copies:3:16384` in rank_scenarios.py). Each honest reader takes 4 × 2
    messages under its key (2 messages and 6 copies), refuses the excess once, and drops the copies unread. The
    copies and the excess are the attacker's traffic, named under node 3 in peers.jsonl; every key of metrics.jsonl
    but time/* equals the run where node 3 sends only its own messages (before: swarm/messages 14, swarm/dropped 6
    and swarm/invalid_transport 2, against 8, absent, absent)."""
    from distributed_helpers import RELATIVE, comparable, launch

    from dgrpo.cli import main
    from dgrpo.metrics.logger import read_metrics

    args = [f"model.name={tiny_model_dir}", *COMMON]
    assert main(["run", *args, f"out_dir={tmp_path}", "name=in"]) == 0
    want = comparable(read_metrics(tmp_path / "in"))
    results = launch(4, ["run", RELATIVE, *args, f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario="copies:3:16384", timeout=150, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    served = [int(n) for n in re.findall(r"serving (\d+) copies of its 2 messages in r[01] ", results[3].output)]
    assert len(served) == 2 and min(served) > 300, results[3].output[-2000:]  # (frames of 2 messages each)
    assert comparable(read_metrics(tmp_path / "d")) == want  # every key but time/*
    peers = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    for p in peers:  # the attacker named for its flood: the excess refused once per cap, its 6 copies read
        assert p["banned"] == {} and all(p["peers"][n]["transport"] == {} for n in "012"), p
        assert p["peers"]["3"]["accepted"] == 2 and p["peers"]["3"]["rejected"] == {}, p
        assert p["peers"]["3"]["transport"]["copy"] == 6 and p["peers"]["3"]["transport"]["flood"] >= 1, p
        assert all(p["views"][v]["3"]["flood"] >= 1 for v in ("1", "2")), p  # the other honest ranks refused it too
