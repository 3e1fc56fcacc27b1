"""The record of a round (``metrics.jsonl``), and how processes that host different nodes make one.

In-process, one process hosts every node and its round record is the record. In a distributed
swarm (one node per rank):

* homogeneous: every honest rank holds the same weights and computes the same update, so the lowest
  live honest rank alone evaluates and logs, exactly what the in-process swarm logs;
* heterogeneous: each honest rank holds its own policy; each evaluates and builds its record, the
  main rank gathers them and :func:`merge_records` combines them the way :func:`round_record` and
  :func:`dgrpo.training.evaluate.evaluate` combine several policies, so ``metrics.jsonl`` is the same.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from dgrpo.grpo.learner import UpdateStats
from dgrpo.rewards.format import format_reward
from dgrpo.swarm.protocol import counted
from dgrpo.swarm.swarm import Received
from dgrpo.tasks.base import reward_metrics
from dgrpo.training.evaluate import EVAL_MEANS, add_intervals
from dgrpo.training.main_dir import main_dir
from dgrpo.training.peer_records import RecordRefused, parse_peer_record
from dgrpo.training.run_files import own_peers_file
from dgrpo.types import Message, Rollout

log = logging.getLogger(__name__)
PER_POLICY = ("train/loss", "train/grad_norm", "train/used", "time/defense", "time/reward")  # (and time/defense/*): /node{k} when several


@dataclass
class PolicyReport:
    """What one honest policy did in a round: the rollouts it received (with rewards and verdicts),
    the messages it refused, its update, the seconds of its rewards and of each defense, and each
    defense's cumulative counters (:func:`dgrpo.defenses.base.defense_counters`). What its receive
    dropped unread (copies of a message it read earlier in the round, a flooding signer's excess) is
    not here: ``peers.jsonl`` names it under who delivered it (``Received.carried``). Of ``invalid``,
    only the refusals of messages authenticated for this run, round and slot count in the round's record
    (:attr:`refused`, :func:`dgrpo.swarm.protocol.counted`); the rest are named in ``peers.jsonl`` only."""

    rollouts: list[Rollout]
    invalid: list[tuple[Message, str]] = field(default_factory=list)
    update: UpdateStats | None = None
    reward_seconds: float = 0.0
    defense_times: dict[str, float] = field(default_factory=dict)
    defense_counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def defense_seconds(self) -> float:
        return sum(self.defense_times.values())

    @property
    def refused(self) -> list[tuple[Message, str]]:
        """The refusals the round's record counts (``swarm/invalid``): of messages that verify under their
        signer's key for this run, round and slot, refused by a rule the signer chose or an honest sampler can
        break (content, seed, share, length, ``special token``, ...); a refusal by a rule of
        :data:`~dgrpo.swarm.protocol.UNAUTHENTICATED` (a replay, a re-spelled or forged signature) is left out."""
        return [(m, reason) for m, reason in self.invalid if counted(reason)]

    @property
    def read(self) -> int:
        """Messages the policy's receive read (``swarm/messages``): those it accepted and :attr:`refused`."""
        return len(self.rollouts) + len(self.refused)


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def round_record(run, round_idx: int, reports: dict[int, PolicyReport], times: dict[str, float]) -> dict:
    """Metrics of one round: rewards per node, update statistics, defense rates, phase times.

    ``swarm/messages`` is what the lowest honest policy's receive read (:attr:`PolicyReport.read`: the
    messages it accepted and those authenticated for this run, round and slot it refused), ``swarm/invalid``
    those refusals summed over the honest policies (:attr:`PolicyReport.refused`). Never counted: copies of a
    message already read, a flooding signer's excess, and messages not authenticated for the round (another
    run's or round's, a re-spelled or forged signature, another node's slot): traffic anyone could send, named
    in ``peers.jsonl``, so a replay or a flood leaves the record of the run without it (docs/protocol.md, "The
    round's record under attack").

    Args:
        reports: owner node id → report, one per distinct honest policy.
        times: phase → seconds (generate, exchange, update, round).
    """
    rec: dict = {"round": round_idx}
    rec.update({f"time/{k}": round(v, 3) for k, v in times.items()})
    report = reports[min(reports)]  # rewards are the same for every honest receiver (same task)
    by_node: dict[int, list[float]] = defaultdict(list)
    for r in report.rollouts:
        by_node[r.sender].append(r.reward)
    for node in range(run.cfg.swarm.nodes):
        rec[f"train/reward/node{node}"] = _mean(by_node.get(node, []))
    # honest: sent by an honest node and written by it (a forged message claiming an honest sender, or an honest
    # node's message re-sent by an attacker, carries its simulation label and is not the honest nodes' work)
    honest = [r for r in report.rollouts if r.sender not in run.cfg.swarm.malicious and r.label == "honest"]
    rec["train/reward_honest"] = _mean([r.reward for r in honest])
    rec["train/completion_tokens"] = _mean([len(r.completion_ids) for r in honest])
    # The think/answer format alone: it is learnt long before arithmetic, so it shows learning early.
    rec["train/format_rate"] = _mean([format_reward(run.task.completion_prefix + r.text) for r in honest])
    rec.update(reward_metrics(run.task))  # a rubric's reward functions, weight 0 included (train/rubric/<name>)
    rec["swarm/messages"] = report.read
    rec["swarm/invalid"] = sum(len(r.refused) for r in reports.values())
    for own, rep in reports.items():
        suffix = "" if len(reports) == 1 else f"/node{own}"
        if rep.update is not None:
            rec[f"train/loss{suffix}"] = rep.update.loss
            rec[f"train/grad_norm{suffix}"] = rep.update.grad_norm
            rec[f"train/used{suffix}"] = rep.update.used
        rec[f"time/reward{suffix}"] = round(rep.reward_seconds, 3)
        rec[f"time/defense{suffix}"] = round(rep.defense_seconds, 3)
        for name, secs in rep.defense_times.items():
            rec[f"time/defense/{name}{suffix}"] = round(secs, 4)
    if run.cfg.defenses:
        rec.update(defense_record(report.rollouts))
        for name, counts in report.defense_counts.items():  # cumulative (judge: unparseable, failed, ...)
            rec.update({f"defense/{name}/{k}": v for k, v in counts.items()})
        rec["time/defense_fraction"] = report.defense_seconds / times["round"] if times.get("round") else None
    return rec


PEERS_FILE = "peers.jsonl"


def _who(node: int | None) -> str:
    return "unsigned" if node is None else str(node)


def peer_record(round_idx: int, report: PolicyReport, received: Received | None = None,
                transport_rejected: Sequence[tuple[int, str]] = ()) -> dict:
    """Per sender, what one honest policy did with its messages in a round (issue 13, point 6).

    A sender is the node whose key signed the message (``"unsigned"``: no roster key verifies it).

    Returns:
        ``{"round": r, "peers": {sender: {"received", "accepted", "rejected": {reason: n},
        "defense": {name: n}, "duplicates", "transport": {reason: n}}}}``; ``rejected`` counts protocol
        refusals by the rule that refused (the reason's text before ``:``), ``defense`` the accepted
        rollouts each defense rejected, ``transport`` what the transport refused under the sender's
        store key before any signature could be read, and the messages dropped without a strike
        (replays, copies, re-spelled signatures: ``Received.carried``) that this node delivered where
        that is known (in-process: the routing attacker; distributed: the store key).
    """
    peers: dict[str, dict] = defaultdict(lambda: {"received": 0, "accepted": 0, "rejected": Counter(),
                                                  "defense": Counter(), "duplicates": 0, "transport": Counter()})
    for r in report.rollouts:
        p = peers[_who(r.sender)]
        p["received"] += 1
        p["accepted"] += 1
        for v in r.verdicts:
            p["defense"][v.defense] += 1
    signers = received.signers if received is not None else [None] * len(report.invalid)
    for (_, reason), signer in zip(report.invalid, signers):
        p = peers[_who(signer)]
        p["received"] += 1
        p["rejected"][reason.split(":", 1)[0]] += 1
    for node, n in (received.duplicates.items() if received is not None else ()):
        peers[_who(node)]["duplicates"] += n
    for node, reason in transport_rejected:
        peers[_who(node)]["transport"][reason.split(":", 1)[0]] += 1
    for node, rule in (received.carried if received is not None else ()):  # who delivered a replay or copy
        peers[_who(node)]["transport"][rule] += 1
    out = {}
    for who in sorted(peers, key=lambda w: (w == "unsigned", int(w) if w.isdigit() else 0)):
        p = peers[who]
        out[who] = {**p, "rejected": dict(p["rejected"]), "defense": dict(p["defense"]), "transport": dict(p["transport"])}
    return {"round": round_idx, "peers": out}


def peers_of_round(run, round_idx: int, report: PolicyReport) -> dict:
    """The round's per-peer record (:func:`peer_record` of the lowest reported honest policy's receive),
    with ``views``: what the other ranks' transports refused, by rank (distributed: shared in the
    cross-check), so a store attack only another rank saw is named here too. Only records: the
    strikes and bans it costs a peer are the recipe's next step (:func:`dgrpo.recipes.swarm_round.account`).
    """
    owner = min(o for o, rep in run.swarm.trained.items() if o in run.swarm.policies)
    rec = peer_record(round_idx, report, run.swarm.last_received.get(run.swarm.trained[owner]), run.transport.rejected)
    views = run.transport.peer_views
    if views:
        rec["views"] = {str(rank): _counts(items) for rank, items in sorted(views.items())}
    return rec


def log_peers(run, rec: dict) -> None:
    """Append ``rec`` to ``peers.jsonl`` (main process only, in :func:`~dgrpo.training.main_dir.main_dir`) and to this
    process's own :func:`own_peers_file`."""
    for name in ([PEERS_FILE] if main_dir(run) else []) + [n for n in [own_peers_file(run)] if n]:
        with open(run.run_dir / name, "a") as f:
            f.write(json.dumps(rec) + "\n")


def _counts(items: Sequence[tuple[int | None, str]]) -> dict[str, dict[str, int]]:
    """(node, reason) pairs → {node: {rule: n}} (the rule: the reason's text before ``:``)."""
    out: dict[str, Counter] = defaultdict(Counter)
    for node, reason in items:
        out[_who(node)][str(reason).split(":", 1)[0]] += 1
    return {who: dict(c) for who, c in sorted(out.items())}


def rejection_counts(rollouts: Sequence[Rollout]) -> dict[str, Counter]:
    """Per defense: counts of rejected rollouts by label, plus totals by label under ``"_total"``."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in rollouts:
        counts["_total"][r.label] += 1
        for v in r.verdicts:
            counts[v.defense][r.label] += 1
    return counts


def defense_record(rollouts: Sequence[Rollout]) -> dict:
    """Rejections per defense, detection rate on poisoned and false-positive rate on honest rollouts."""
    counts = rejection_counts(rollouts)
    total = counts.pop("_total", Counter())  # (no rollout at all: every sender refused or banned)
    rec = {"defense/received": sum(total.values())}
    rejected_any = defaultdict(int)
    for r in rollouts:
        if r.verdicts:
            rejected_any[r.label] += 1
    counts["any"] = rejected_any
    for name, by_label in counts.items():
        rec[f"defense/{name}/rejected"] = sum(by_label.values())
        if total.get("poisoned"):
            rec[f"defense/{name}/detection_rate"] = by_label.get("poisoned", 0) / total["poisoned"]
        if total.get("honest"):
            rec[f"defense/{name}/false_positive_rate"] = by_label.get("honest", 0) / total["honest"]
    rec["defense/poisoned_received"] = total.get("poisoned", 0)
    rec["defense/honest_received"] = total.get("honest", 0)
    return rec


def _per_policy(key: str) -> bool:
    return key in PER_POLICY or key.startswith("time/defense/")


def merge_records(records: dict[int, dict]) -> dict:
    """One round's record from the records each honest policy's owner built alone.

    Mirrors :func:`round_record` and ``evaluate`` over several policies: rewards and defense rates
    come from the lowest owner; update statistics get a ``/node{k}`` suffix per owner;
    ``swarm/invalid`` is summed; the evaluation means (:data:`~dgrpo.training.evaluate.EVAL_MEANS`)
    and attack metrics are averaged, with per-node accuracies.

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
        for key in (k for k in EVAL_MEANS if k in out):
            out[key] = statistics.fmean(records[o][key] for o in owners)
        if "eval/n" in out:
            out["eval/n"] = sum(records[o]["eval/n"] for o in owners)
            add_intervals(out)  # the pooled rates' intervals over every policy's completions
        out.update({f"eval/accuracy/node{o}": records[o]["eval/accuracy"] for o in owners})
        for key in [k for k in out if k.startswith("attack/")]:
            vals = [records[o][key] for o in owners if records[o].get(key) is not None]
            out[key] = statistics.fmean(vals) if vals else None
    return out


def reporting_nodes(run) -> list[int]:
    """Nodes whose records make the logged one: the lowest live honest node (homogeneous), or every
    live honest node (heterogeneous: each holds its own policy)."""
    live = [n for n in range(run.cfg.swarm.nodes) if n not in run.cfg.swarm.malicious and n in run.transport.alive]
    return live[:1] if run.cfg.swarm.models is None else live


def evaluates(run) -> bool:
    """Whether this process runs the validation evaluation: it hosts a reporting node."""
    return bool(set(run.transport.local_nodes) & set(reporting_nodes(run)))


def share_record(run, rec: dict) -> list[dict]:
    """The records to log now on the main process (in round order), none on the others.

    Every process hosting a reporting node posts its record (JSON through the transport) and the main
    process merges them. A peer's record is what the peer says: the main parses it strictly against its own
    (:func:`dgrpo.training.peer_records.parse_peer_record`: only the keys it merges, within their rules), and a
    record refused is named in ``peers.jsonl`` under its sender (:func:`log_record_refusals`; no strike) while the
    round's record goes on without it. A record not in when the main's short read ends (its sender held, e.g. by a
    relay an attacker withheld from it) is still the round's metrics (review r31o H7): the round is held
    (``run.held_records``) and logged at the main's next record, once that record is read again
    (:meth:`~dgrpo.transports.base.Transport.late_records`; its sender posted it before its next round), or at
    :func:`flush_held` (before a checkpoint, at the end); the final record (``round == rounds``) reads none again:
    the round before it, if held, stays held with it, and both are read at the end
    (:meth:`~dgrpo.transports.base.Transport.last_records`). Only a record still missing then is named ``missing
    record``.
    """
    nodes = reporting_nodes(run)
    mine = sorted(set(run.transport.local_nodes) & set(nodes))
    if not mine:
        return []
    out = [] if rec["round"] >= run.cfg.rounds else flush_held(run)  # (no round payload comes before the final one)
    got = run.transport.collect_at_main(f"rec{rec['round']}", json.dumps(rec).encode(), nodes)
    if got is None:
        return out
    held = {"rec": rec, "records": {mine[0]: rec}, "refused": [], "missing": sorted(set(nodes) - set(mine)),
            "alive": len(run.transport.alive) if run.transport.failed else None}
    _take(held, got, run.cfg.sampling.max_new_tokens)
    run.held_records.append(held)
    return out + (flush_held(run) if not any(h["missing"] for h in run.held_records) else [])


def _take(held: dict, got: dict[int, bytes], max_new_tokens: int) -> None:
    """Parse the records ``got`` (node → JSON) of the ``held`` round into it (a refused one named with the round)."""
    for node in sorted(set(got) & set(held["missing"])):
        held["missing"].remove(node)
        try:
            held["records"][node] = parse_peer_record(got[node], held["rec"], max_new_tokens)
        except RecordRefused as err:
            held["refused"].append((node, str(err)))


def flush_held(run, final: bool = False) -> list[dict]:
    """The held rounds' records, in round order (``[]`` without one), their missing records read again first (one
    short read, :meth:`~dgrpo.transports.base.Transport.late_records`; ``final``, at the run's end: the last records,
    :meth:`~dgrpo.transports.base.Transport.last_records`), and those still missing named ``missing record``."""
    helds, run.held_records = run.held_records, []
    wanted = {f"rec{h['rec']['round']}": h["missing"] for h in helds if h["missing"]}
    if wanted and final:
        late = run.transport.last_records(wanted)
    else:
        late = {tag: run.transport.late_records(tag, senders) for tag, senders in wanted.items()}
    out = []
    for held in helds:
        rnd = held["rec"]["round"]
        _take(held, late.get(f"rec{rnd}", {}), run.cfg.sampling.max_new_tokens)
        refused = held["refused"] + [(n, f"missing record: none came for exchange 'rec{rnd}' in time")
                                     for n in held["missing"]]
        log_record_refusals(run, rnd, refused)
        rec = merge_records(held["records"])  # (what the transport refused is named in peers.jsonl, not counted here)
        if held["alive"] is not None:
            rec["swarm/nodes_alive"] = held["alive"]
        out.append(rec)
    return out


def log_record_refusals(run, round_idx: int, refused: Sequence[tuple[int, str]]) -> None:
    """Name each peer whose round record the main refused or missed (``refused``: (node, reason)): one warning line
    each, and one more ``peers.jsonl`` line for the round, ``{"round": r, "peers": {node: {…, "transport":
    {"record" | "missing record": 1}}}, "records": {node: reason}}`` (the round's own line was written before the
    records were shared; no strike: a record is metrics, not a message of the protocol)."""
    if not refused:
        return
    for node, reason in refused:
        log.warning("node %d's record of round %d left out of the metrics: %s", node, round_idx, reason)
    peers = {str(n): {"received": 0, "accepted": 0, "rejected": {}, "defense": {}, "duplicates": 0,
                      "transport": {reason.split(":", 1)[0]: 1}} for n, reason in refused}
    log_peers(run, {"round": round_idx, "peers": peers, "records": {str(n): reason for n, reason in refused}})
