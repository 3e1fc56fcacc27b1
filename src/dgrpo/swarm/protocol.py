"""The swarm protocol a receiver enforces on peers that may not follow it (issue 13).

Before a message becomes a rollout the receiving node checks, in order (each failure its own reason,
the text before ``:`` naming the rule):

    signature / identity / run   signed by the node it names, for this run (:mod:`dgrpo.swarm.identity`)
    round                        sent for this round (a replay of an earlier round's signed message fails)
    banned                       the signer is not banned (:class:`BanList`)
    schema / size / prompt / special token / vocabulary / consistency   :func:`dgrpo.swarm.validation.check_message`
    seed                         the claimed seed is the one the protocol assigns:
                                 ``completion_seed(run seed, round, node, prompt, index)`` (seed binding)
    share                        the slot is one the schedule gives the sender (prompt, index), once
                                 (``share: duplicate``), and the sender's vertical prompts are at most B/m
                                 (or exactly the assigned ones with ``assign_prompts``); a node planned to
                                 join at round r (``Schedule.joins``) has no slots before r
    tokenizer                    homogeneous swarms: the receiver's own tokenizer (``Protocol.homogeneous``)
    length                       at most ``max_new_tokens`` completion tokens (with ``enforce_length``)

and counts identical texts from different slots of one sender (``duplicates``; dropped with
``drop_duplicates``). An exact copy of a message already read (the same signed content's digest) is dropped
as ``copy``: never a strike against its signer (anyone can repeat a signed message, only its signer can change
it), named in ``peers.jsonl`` under the node that delivered it, and, like every refusal of ``UNAUTHENTICATED``,
left out of ``swarm/messages`` and ``swarm/invalid`` (docs/protocol.md, "The round's record under attack").
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Literal, Mapping, Sequence

from pydantic import Field, field_validator, model_serializer

from dgrpo.registry import StrictConfig
from dgrpo.swarm.banlist import BanList  # (split out; still importable from here)
from dgrpo.swarm.identity import DIGEST_HEX, VERSION, canonical_hex, header_bytes, message_digest, signed_bytes, signed_header
from dgrpo.swarm.schedule import horizontal_prompts, vertical_prompts
from dgrpo.swarm.clockconfig import relative_left_out, round_s_value
from dgrpo.types import Message, Problem

log = logging.getLogger(__name__)
FLOOD_FACTOR = 4  # distinct messages a signer may sign per round, in multiples of its slots (then ``flood``)
# The strike table (docs/protocol.md, issue 31): the rule of a refusal (its reason before ":") → a strike or
# not. A strike needs a message that verifies under the signer's key for this run and round and breaks a rule
# the signer chose; what anyone holding an old signed message could send (another run or round, a copy, a
# re-spelled signature) is dropped without one. A rule in neither set (a new one) strikes nobody.
DROPPED = frozenset({"schema", "malformed", "signature", "run", "round", "copy", "flooded", "banned"})
# Refused but never a strike: an honest node can break these rules by itself (its sampler drew a special token
# id, two bound samples have one text) or the refusal follows from data anyone could remove (``incomplete``).
REFUSED = frozenset({"special token", "duplicate", "incomplete"})
# Named in peers.jsonl under the node (its ``transport`` column), never a strike nor a refused message: what
# slowed every honest node within the bounds (docs/distributed.md, "Clocked rounds"): a clocked round_s proposal
# that stands out (transports/clockauto.slow), an honoured signed skip notice (transports/skips.py). An honest
# slow machine can do either (task h31h).
NAMED = frozenset({"slow proposal", "skip"})
STRIKES = frozenset({"identity", "flood", "tokenizer", "prompt", "size", "vocabulary", "consistency", "seed",
                     "share", "length", "decode"})
# What the round's record counts (docs/protocol.md, "The round's record under attack"): a refusal by one of these
# rules is of a message not authenticated for this run, round and slot (no canonical signature, no roster key
# verifies it, signed for another run or round, or by a key other than its slot's node; a copy of one read
# before, a flooding signer's excess): anyone holding an old signed message, or none, could send it, so it is
# named in peers.jsonl only and never counted in ``swarm/messages`` nor ``swarm/invalid`` (a key the sender
# would set). Any other refusal is of a message its signer signed for this run, round and slot (or banned): it counts.
UNAUTHENTICATED = frozenset({"schema", "malformed", "signature", "run", "round", "identity", "copy", "flooded"})


def counted(reason: str) -> bool:
    """Whether a refusal with ``reason`` (its rule: the text before ``:``) counts in the round's record
    (``swarm/messages``, ``swarm/invalid``): False for a rule in :data:`UNAUTHENTICATED`."""
    return reason.split(":", 1)[0] not in UNAUTHENTICATED


class ProtocolConfig(StrictConfig):
    """``swarm.protocol``: what every honest node enforces on the messages it receives."""

    sign: bool = Field(True, description="Sign every message with the node's Ed25519 key and refuse messages whose signature does not verify against the roster (identity, run, config).")
    bind_seeds: bool = Field(True, description="Refuse a message whose claimed sampling seed is not completion_seed(run seed, round, node, prompt, index) (stops seed grinding).")
    enforce_shares: bool = Field(True, description="Refuse messages outside the sender's slots of the schedule: another prompt or index, a second message for one slot, more vertical prompts than B/m.")
    enforce_length: bool = Field(True, description="Refuse a completion of more than sampling.max_new_tokens tokens (an honest node never samples more). The shipped attackers know the rule and shorten their poisons to fit (dgrpo.attacks.common.fit_poison); off, they send the paper's unshortened poisons.")
    complete_shares: bool = Field(False, description="Refuse every completion of a prompt whose sender's accepted messages do not fill all its slots of that prompt (G in vertical mode, G/m in horizontal): a node cannot cherry-pick its samples by leaving slots out (or by filling them with messages it knows are refused on receipt). Where the round fixes a node's prompts (horizontal mode; vertical with assign_prompts), a node that does not fill every slot of every one of them has all its prompts of the round refused (whole share or none). Off by default: an honest message refused on receipt (a sampled special token: 0.1% of SmolLM2's honest completions; with drop_duplicates, two bound samples of the same text) then costs its node's whole share (refused as `incomplete`, never a ban strike: the same refusal follows from messages another rank removed from the store). Open: a filler that passes receipt and is later rejected by a content defense (replay) still counts, so behind replay a node can still choose which of its samples enter the loss by sending fillers for the others.")
    assign_prompts: bool = Field(False, description="Vertical: the protocol assigns each node its B/m prompts (the seeded schedule of its node id) and receivers refuse any other prompt, so a node cannot pick prompts for the seeds it knows.")
    drop_duplicates: bool = Field(False, description="Drop a completion whose text equals another of the same sender's completions in the round (they are counted per sender either way).")
    foreign_length_factor: float = Field(2.0, ge=1, description="A completion from a node with another tokenizer may re-encode to this many times sampling.max_new_tokens tokens (tokenizers split text differently); its own token count must still be within max_new_tokens.")
    ban_after: int = Field(0, ge=0, description="Stop accepting a peer once this many of its messages were refused by the protocol or rejected by a defense (0 = never ban). Bans are logged, kept in the run directory (bans.json) and survive resume.")
    roster: str | None = Field(None, description="Roster file written by `dgrpo keys` (node id → public key); None = fresh keys made for this run (in-process runs; distributed and hivemind runs exchange public keys at startup). Required with swarm.hivemind.join: it names the joiners too.")
    key_dir: str | None = Field(None, description="Folder holding this node's private key node{k}.key (written by `dgrpo keys`); needed with roster.")
    schedule: Literal["relative", "clock"] | None = Field(None, description="swarm.transport=distributed: `clock` (absolute deadlines from a start T0 agreed at start-up: post by T0 + n·round_s, direct reads until + direct_s, relays until + relay_s; a relay counts for others' messages only, so one malicious rank cannot split the honest nodes' message sets: dgrpo.transports.clocked, docs/protocol.md) or `relative` (each node's round deadlines count from its own post, with holds for late peers: rounds end as soon as every payload and relay is in, 2-10 times shorter, but one malicious rank can split the honest nodes' message sets: docs/distributed.md). Unset: `clock` with round_s=auto on swarm.transport=distributed (a new run's config.yaml records it), nothing on the other transports (in-process has one message set by construction; hivemind has its own deadlines).")
    round_s: Annotated[float, Field(gt=0, le=7 * 86400)] | Literal["auto"] | None = Field(None, description="schedule=clock: seconds between two rounds' post deadlines (default auto, with the schedule unset or clock, on swarm.transport=distributed); must exceed a round's compute + direct_s + relay_s. `auto`: each rank times its worst-case round compute at start-up (dgrpo.training.roundtime), proposes it signed beside its start, and every rank takes the largest proposal, at most swarm.timeout_s (dgrpo.transports.clockauto; docs/distributed.md, `round_s: auto`).")
    direct_s: float | None = Field(None, gt=0, le=7 * 86400, description="schedule=clock: seconds from a round's post deadline to the end of its direct reads (an honest payload must be read whole within it); default round_s / 4 (with round_s=auto: 4 s, sized for a transfer, not the round).")
    relay_s: float | None = Field(None, gt=0, le=7 * 86400, description="schedule=clock: seconds from the end of direct reads to the end of relay reads (an honest relay must be read within it); default round_s / 4 (with round_s=auto: 4 s).")
    max_skips: int | None = Field(None, ge=0, le=10**6, description="schedule=clock: a node whose payload is not ready by a round's post deadline serves a signed skip notice; peers do not accuse it while it had messages in one of their last max_skips round sets (then it is accused as missing, and a quorum expels it); 0: no notice honoured. Default 2 (dgrpo.transports.skips).")
    _round_s_in_one_line = field_validator("round_s", mode="before")(round_s_value)  # (not pydantic's two union lines)
    _clock_left_out = model_serializer(mode="wrap")(relative_left_out)  # (configs, fingerprints as before it)


@dataclass(frozen=True)
class Schedule:
    """What the schedule gives each sender in a round (the receiver's own derivation)."""

    mode: str
    nodes: int
    prompts_per_round: int
    group_size: int
    run_seed: int
    pool: Sequence[Problem]
    assign_prompts: bool = False
    joins: Mapping[int, int] = field(default_factory=dict)  # node → first round it writes (a later joiner)

    def first_round(self, node: int) -> int:
        """The first round in which ``node`` has slots (0, or its planned join round)."""
        return self.joins.get(node, 0)

    def horizontal(self, round_idx: int) -> set[str]:
        return {p.prompt_id for p in horizontal_prompts(self.pool, self.prompts_per_round, self.run_seed, round_idx)}

    def assigned(self, round_idx: int, node: int) -> set[str]:
        per_node = self.prompts_per_round // self.nodes
        return {p.prompt_id for p in vertical_prompts(self.pool, per_node, self.run_seed, round_idx, node)}

    def slots(self, node: int) -> int:
        """How many messages ``node`` sends in a round (B·G/m in either mode)."""
        return self.prompts_per_round * self.group_size // self.nodes

    def indices(self, node: int) -> range:
        if self.mode == "horizontal":
            share = self.group_size // self.nodes
            return range(node * share, (node + 1) * share)
        return range(self.group_size)


class ShareCheck:
    """One receiver's check of a round's slots (a fresh one per receive)."""

    def __init__(self, schedule: Schedule, round_idx: int):
        self.schedule, self.round_idx = schedule, round_idx
        self.global_prompts = schedule.horizontal(round_idx) if schedule.mode == "horizontal" else None
        self.seen: set[tuple[int, str, int]] = set()  # slots with an accepted message
        self.verified: set[tuple[str, int]] = set()  # (message_digest, signer) of every message verified so far
        self.screened: dict[Message, tuple] = {}  # message → its screening verdict (signer, reason, copy group)
        self.signed: Counter = Counter()  # signer → distinct messages it signed for this run and round
        self.prompts: dict[int, set[str]] = {}
        self.texts: dict[int, dict[str, int]] = {}  # sender → text → first index

    def check(self, sender: int, msg: Message) -> str | None:
        s = self.schedule
        if not 0 <= sender < s.nodes:
            return f"share: node {sender} is not in the swarm"
        if self.round_idx < s.first_round(sender):
            return (f"share: node {sender} joins at round {s.first_round(sender)} and has no slots in round "
                    f"{self.round_idx}")
        if self.global_prompts is not None and msg.prompt_id not in self.global_prompts:
            return "share: prompt is not one of this round's prompts"
        if s.mode == "vertical":
            mine = self.prompts.setdefault(sender, set())
            if s.assign_prompts and msg.prompt_id not in s.assigned(self.round_idx, sender):
                return "share: prompt is not one the protocol assigned to this node"
            if msg.prompt_id not in mine and len(mine) >= s.prompts_per_round // s.nodes:
                return f"share: more than {s.prompts_per_round // s.nodes} prompts"
        idx = s.indices(sender)
        if msg.index not in idx:
            return f"share: index {msg.index} outside the node's slots {idx.start}..{idx.stop - 1}"
        if (sender, msg.prompt_id, msg.index) in self.seen:
            return f"share: duplicate message for index {msg.index}"
        return None

    def accept(self, sender: int, msg: Message) -> None:
        self.seen.add((sender, msg.prompt_id, msg.index))
        if self.schedule.mode == "vertical":
            self.prompts.setdefault(sender, set()).add(msg.prompt_id)

    def incomplete(self, accepted: list[tuple[int, str]]) -> dict[tuple[int, str], str]:
        """(sender, prompt) pairs among ``accepted`` (one per message that passed every receipt check,
        duplicates dropped) to refuse, each with its reason.

        A prompt whose slots the sender did not all fill is refused. Where the round fixes which prompts a
        node owes (horizontal: the round's prompts; vertical with ``assign_prompts``: its assigned ones), a
        node that did not fill every slot of every one of them has all its prompts of the round refused: its
        share is sent whole or not at all, so it cannot choose which of its prompts count (by leaving one out
        or sending a single slot of it)."""
        s, count = self.schedule, Counter(accepted)
        short = {k for k, c in count.items() if c < len(s.indices(k[0]))}
        gaps = {k: f"incomplete: node {k[0]} did not fill its slots of this prompt" for k in short}
        for sender in sorted({n for n, _ in count}):
            owed = self.owed_prompts(sender)
            unfilled = sorted(pid for pid in owed or () if (sender, pid) not in count or (sender, pid) in short)
            if unfilled:
                reason = (f"incomplete: node {sender} did not fill {len(unfilled)} of its {len(owed)} prompts "
                          f"of the round (first: {ascii(unfilled[0])[1:41]}); a share is sent whole or not at all")
                gaps.update({k: reason for k in count if k[0] == sender})
        return gaps

    def owed_prompts(self, sender: int) -> set[str] | None:
        """The prompts whose slots ``sender`` owes this round, or None where the node picks them (vertical
        without ``assign_prompts``)."""
        if self.global_prompts is not None:
            return self.global_prompts
        if self.schedule.assign_prompts:
            return self.schedule.assigned(self.round_idx, sender)
        return None

    def duplicate_of(self, sender: int, msg: Message) -> int | None:
        """Index of an earlier completion of ``sender`` in this round with the same text, else None."""
        texts = self.texts.setdefault(sender, {})
        key = f"{msg.prompt_id}\x00{msg.text}"
        if key in texts:
            return texts[key]
        texts[key] = msg.index
        return None


@dataclass
class Protocol:
    """Everything one process needs to sign what its nodes send and check what they receive.

    Attributes:
        cfg: the rules that are on (:class:`ProtocolConfig`).
        schedule: the receiver's own derivation of every sender's slots.
        max_new_tokens: the swarm's sampling limit (the length rule).
        signers: hosted node → its signer (its private key never leaves this process).
        verifier: checks signatures against the roster (None with ``sign: false``).
        bans: refusals per peer and the bans.
        homogeneous: every node runs the receiver's model, hence its tokenizer: a message naming
            another tokenizer is refused (``tokenizer``; else it could claim any token count and be
            held only to the foreign re-encoding bound of the length rule).
    """

    cfg: ProtocolConfig
    schedule: Schedule
    max_new_tokens: int
    signers: dict = field(default_factory=dict)
    verifier: object | None = None
    bans: BanList = field(default_factory=BanList)
    homogeneous: bool = False

    def bind_launch(self, launch: str) -> None:
        """From now on sign and verify for this launch only: the run context ``<name>|<fp>`` becomes
        ``<name>|<fp>|<launch>`` (:func:`dgrpo.swarm.identity.run_context`), so a message an earlier
        launch of the same run signed (a rerun, a resume) is refused as ``run``: dropped, no strike.
        ``launch``: the transport's launch id (:meth:`dgrpo.transports.base.Transport.check_startup`)."""
        if self.verifier is not None and launch:
            self.verifier.context = f"{self.verifier.context}|{launch}"
            self.signers = {n: s.for_context(self.verifier.context) for n, s in self.signers.items()}

    def length_reason(self, own_tokenizer: bool, claimed: int, used: int) -> str | None:
        """The length rule: at most max_new_tokens completion tokens (foreign tokenizers: see the config)."""
        limit = self.max_new_tokens
        if claimed > limit:
            return f"length: {claimed} tokens (sampling.max_new_tokens={limit})"
        if not own_tokenizer and used > self.cfg.foreign_length_factor * limit:
            return (f"length: re-encodes to {used} tokens (limit {self.cfg.foreign_length_factor:g} × "
                    f"sampling.max_new_tokens={limit})")
        return None


def equivocators(reports: dict[int, bytes], verifier, round_idx: int) -> dict[int, str]:
    """Senders that signed two different completions for one slot of ``round_idx``.

    Args:
        reports: reporting node → JSON list of ``[header, signature]`` it received (any node may
            lie in its report; only valid signatures count, so no report can frame an honest sender).
        verifier: :class:`dgrpo.swarm.identity.SignatureVerifier` of the run.

    Returns:
        sender → the reason (names the slot), for every sender with such a proof.
    """
    contents: dict[tuple, set[str]] = {}
    for raw in reports.values():
        try:
            items = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        for item in items if isinstance(items, list) else []:
            try:
                header, sig = item
                node, slot = header["node"], (header["node"], header["prompt_id"], header["index"])
                # this run and round only, one spelling of the digest: another run's message under the same
                # key, or a re-spelled copy, is no second content (issue 31)
                if (header["round"] != round_idx or not isinstance(node, int) or header.get("v") != VERSION
                        or header.get("context") != verifier.context
                        or canonical_hex(header["content"], DIGEST_HEX) is None):
                    continue
                if verifier.valid(node, header_bytes(header), sig):
                    contents.setdefault(slot, set()).add(header["content"])
            except (TypeError, ValueError, KeyError, AttributeError):
                continue
    out = {}
    for (node, prompt, index), seen in sorted(contents.items(), key=lambda kv: repr(kv[0])):
        if len(seen) > 1 and node not in out:
            out[node] = (f"equivocation: node {node} signed {len(seen)} different completions for prompt "
                         f"{str(prompt)[:40]!r} index {index} in round {round_idx}")
    return out


def compare_views(own: int, views: dict[int, list[Message]], verifier, round_idx: int) -> tuple[dict[int, str], list[Message]]:
    """What the nodes of a swarm received in a round, compared (the distributed cross-check).

    Args:
        own: this node; ``views[own]`` is what it received itself.
        views: node → the signed messages it reports having received (any report may lie: only
            valid signatures count).

    Returns:
        (equivocators, recovered): the senders proved to equivocate (:func:`equivocators`), and the
        validly signed messages of this round that peers report and this node lacks, in the order of
        the lowest reporting peer.
    """
    headers = {n: json.dumps([[signed_header(m), m.signature] for m in view]).encode() for n, view in views.items()}
    caught = equivocators(headers, verifier, round_idx)
    have, extra = {message_digest(m) for m in views.get(own, [])}, []
    for n in sorted(views):
        for m in views[n] if n != own else ():
            digest = message_digest(m)  # copies by content, never by the signature's spelling
            if (digest not in have and m.round == round_idx and m.context == verifier.context
                    and verifier.valid(m.node, signed_bytes(m), m.signature)):
                have.add(digest)
                extra.append(m)
    return caught, extra


def merge_views(own: int, views: dict[int, list[Message]], verifier, round_idx: int) -> tuple[dict[int, str], list[Message]]:
    """The one message list every honest node of a round ends with (the distributed cross-check, issue 31).

    Args:
        own: this node; ``views[own]`` is every message it read itself (junk included).
        views: node → the messages it reports having read this round (any report may lie).

    A report counts only messages signed, for this run and round, by a roster key other than its
    reporter's (a node could show its own messages to some readers only: they count where another node
    read them); ``own``'s view counts whole. Of those, every distinct signed content (by
    :func:`message_digest`) is kept once, senders in id order, each sender's in the order of the lowest
    node that reported it: so nodes that hold the same reports hold the same list, whatever each read
    first, and strikes and bans decided from it agree. ``own``'s other reads (unsigned, other runs and
    rounds, copies: refused without a strike) follow in their order.

    Returns:
        (equivocators, messages): the senders proved to sign two contents for one slot
        (:func:`equivocators`) and the merged list.
    """
    def signer(m: Message) -> int | None:
        if m.round != round_idx or m.context != verifier.context:
            return None
        try:
            who, reason = verifier.identify(m)
        except (TypeError, ValueError):
            return None
        return who if reason is None or reason.startswith("identity") else None

    trusted = {n: [m for m in view if (s := signer(m)) is not None and (s != n or n == own)] for n, view in views.items()}
    headers = {n: json.dumps([[signed_header(m), m.signature] for m in view]).encode() for n, view in trusted.items()}
    caught, seen, by_sender = equivocators(headers, verifier, round_idx), set(), {}
    mine = {}  # digest → own read of it (own objects kept: the transport knows under which key each came)
    for m in trusted.get(own, []):
        mine.setdefault(message_digest(m), m)
    for n in sorted(trusted):
        for m in trusted[n]:
            digest = message_digest(m)
            if digest not in seen:
                seen.add(digest)
                by_sender.setdefault(m.node, []).append(mine.get(digest, m))
    merged = [m for node in sorted(by_sender) for m in by_sender[node]]
    taken = {id(m) for m in merged}
    return caught, merged + [m for m in views.get(own, []) if id(m) not in taken]
