"""Which process evaluates and what the main process logs when nodes live in several processes.

In-process, one process holds every node and its round record is the record. In a distributed
swarm (one node per rank):

* homogeneous: every honest rank holds the same weights and computes the same update, so the lowest
  live honest rank alone evaluates and logs, exactly what the in-process swarm logs;
* heterogeneous: each honest rank holds its own policy; each evaluates and builds its record, the
  main rank gathers them and :func:`merge_records` combines them the way the in-process swarm
  combines its policies (``rounds.py``), so ``metrics.jsonl`` is the same.
"""

from __future__ import annotations

import json
import statistics

from dgrpo.experiments.setup import Run

PER_POLICY = ("train/loss", "train/grad_norm", "train/used", "time/defense")  # (and time/defense/*): /node{k} when several


def _per_policy(key: str) -> bool:
    return key in PER_POLICY or key.startswith("time/defense/")


def merge_records(records: dict[int, dict]) -> dict:
    """One round's record from the records each honest policy's owner built alone.

    Mirrors :func:`dgrpo.experiments.rounds.round_record` and ``evaluate`` over several policies:
    rewards and defense rates come from the lowest owner; update statistics get a ``/node{k}``
    suffix per owner; ``swarm/invalid`` is summed; validation accuracy, its tokens and attack
    metrics are averaged, with per-node accuracies.

    Args:
        records: owner node id → the record it built with only its own policy.
    """
    owners = sorted(records)
    out = dict(records[owners[0]])
    if len(owners) == 1:
        return out
    for key in [k for k in out if _per_policy(k)]:
        del out[key]
    for o in owners:
        out.update({f"{k}/node{o}": v for k, v in records[o].items() if _per_policy(k)})
    if "swarm/invalid" in out:
        out["swarm/invalid"] = sum(records[o].get("swarm/invalid", 0) for o in owners)
    if "eval/accuracy" in out:
        out["eval/accuracy"] = statistics.fmean(records[o]["eval/accuracy"] for o in owners)
        out["eval/completion_tokens"] = statistics.fmean(records[o]["eval/completion_tokens"] for o in owners)
        out.update({f"eval/accuracy/node{o}": records[o]["eval/accuracy"] for o in owners})
        for key in [k for k in out if k.startswith("attack/")]:
            vals = [records[o][key] for o in owners if records[o].get(key) is not None]
            out[key] = statistics.fmean(vals) if vals else None
    return out


def _reporting(run: Run) -> list[int] | None:
    """Nodes whose records make the logged one (None: this process hosts the whole swarm)."""
    transport = run.transport
    if not hasattr(transport, "alive"):
        return None
    live = [n for n in transport.honest if n in transport.alive]
    return live[:1] if run.cfg.swarm.models is None else live


def evaluates(run: Run) -> bool:
    """Whether this process runs the validation evaluation."""
    nodes = _reporting(run)
    return bool(run.swarm.policies) if nodes is None else run.transport.rank in nodes


def share_record(run: Run, rec: dict) -> dict | None:
    """The record to log on the main process, None on the others.

    Distributed and heterogeneous, a non-main honest rank posts its record (JSON through the
    transport) and the main rank merges them; a rank that misses the timeout is declared failed.
    """
    nodes = _reporting(run)
    if nodes is None:
        return rec
    transport = run.transport
    if transport.rank not in nodes:
        return None
    tag = f"rec{rec['round']}"
    if not transport.is_main:
        transport.post(tag, json.dumps(rec).encode())
        return None
    got = transport.collect(tag, nodes)
    out = merge_records({transport.rank: rec, **{n: json.loads(b) for n, b in got.items()}})
    if "swarm/messages" in out and transport.rejected:
        out["swarm/invalid_transport"] = len(transport.rejected)  # refused before the swarm saw them
    if transport.failed:
        out["swarm/nodes_alive"] = len(transport.alive)
    return out
