"""Admission: the protocol's rules a received message passes, in order, before it becomes a rollout.

:data:`RULES` is the whole list (docs/protocol.md, the strike table: the text of a refusal before
``:`` names its rule). Each rule is a small function ``(Admission, Candidate) -> reason or None`` that
reads the message and what the receive has seen so far; the first reason refuses the message and the
rest are not run. Each rule declares its phase (:func:`rule`, :data:`PHASES`): the ``screen`` rules
read no content (schema, unsigned, malformed, copy, signature with its ``run:`` refusals, round, flood,
identity, ban): their verdict is kept per distinct message value, so an exact copy costs a hash
(``copy``); the ``content`` rules read it; the ``slot`` rule (duplicate) takes the slot, last. Any exception on the way is a refusal with its reason (``decode: ...``): a peer's bytes
never crash the round. After every message, :func:`complete_shares` refuses the prompts a sender did
not fill (``swarm.protocol.complete_shares``).

Without a protocol (component tests only: every run builds one) no signature or schedule rule is on
and the claimed ``node`` is trusted.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from dgrpo.policy.chat import encode_completion
from dgrpo.policy.sampling import completion_seed
from dgrpo.swarm.identity import MALFORMED_SIGNATURE, SIGNATURE_HEX, canonical_hex, signed_bytes
from dgrpo.swarm.protocol import DROPPED, FLOOD_FACTOR, Protocol, ShareCheck
from dgrpo.swarm.validation import Limits, check_message, parse_message
from dgrpo.types import Message, Problem, Rollout

if TYPE_CHECKING:
    from dgrpo.policy.policy import Policy
    from dgrpo.tasks.base import Task

log = logging.getLogger(__name__)


@dataclass
class Received:
    """One policy's view of a round's messages: the rollouts it accepted and the messages it refused.

    Attributes:
        rollouts: accepted messages as rollouts (sender = the node whose key signed it), not yet rewarded.
        admitted: the message each rollout was made from (the same objects as received, in rollout order).
        invalid: (message, reason) of every refused message (the round's record counts only those of
            messages authenticated for this run, round and slot: :func:`dgrpo.swarm.protocol.counted`).
        signers: for each refused message, the node it is attributed to (the key that signed it;
            None: no roster key did, "unsigned").
        duplicates: sender → completions whose text repeats another of its slots in the round.
        copies: copies (same :func:`~dgrpo.swarm.identity.message_digest`, whatever the signature's
            spelling) of a message verified earlier in the receive, dropped without a strike.
        flooded: signer → its messages beyond ``FLOOD_FACTOR`` × its slots after the one ``flood``
            refusal, dropped unread.
        carried: (carrier, rule) of each message dropped without a strike (``DROPPED``) that a known
            node delivered (``carriers``): names who replayed or re-spelled a signed message; every
            ``copy`` and ``flooded`` message too, its own signer's included (under its signer where no
            carrier is known), since the round's record does not count them (``swarm/messages``).
    """

    rollouts: list[Rollout]
    admitted: list[Message] = field(default_factory=list)
    invalid: list[tuple[Message, str]] = field(default_factory=list)
    signers: list[int | None] = field(default_factory=list)
    duplicates: Counter = field(default_factory=Counter)
    copies: int = 0
    flooded: Counter = field(default_factory=Counter)
    carried: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Candidate:
    """One message under admission and what the rules learnt of it so far."""

    msg: Message
    signer: int | None = None  # the node whose key signed it (the claimed node without signing)
    data: bytes = b""  # its signed bytes (signing or shares on)
    digest: str = ""  # sha256 of ``data`` (= message_digest)
    group: tuple = ()  # what its copies share: (digest, signer), or the first screened object's id (unsigned swarm)
    identity: str | None = None  # the verifier's identity refusal, given after round and flood
    rollout: Rollout | None = None


@dataclass
class Admission:
    """One receive: a policy admitting one round's messages (a fresh one per receive).

    Attributes:
        protocol: the rules that are on and the receiver's keys and schedule (None: no protocol).
        policy: the receiving policy (its tokenizer, its prompt encoding).
        round_idx: the round received.
        problems: the training pool by prompt id (a held-out prompt is refused: ``prompt``).
        limits: message size limits.
        run_seed: the run seed (the seeds the protocol assigns).
        task: the task (prompts of the rollouts).
        label: message → its label (the simulation's truth) for the rollout.
        shares: the round's slot check (None without a protocol).
        screen_shares: ``shares`` where signatures or shares are checked, else None (the paper's
            unprotected swarm: copies and floods reach the defenses).
        signing: signatures are checked.
        received: what the receive accepted and refused so far.
        deliveries: a copy group (:attr:`Candidate.group`) → (its signer, who delivered each of its messages, the
            first one and its copies, in order: None where unknown); :func:`name_copies` names the copies.
    """

    protocol: Protocol | None
    policy: "Policy"
    round_idx: int
    problems: Mapping[str, Problem]
    limits: Limits
    run_seed: int
    task: "Task"
    label: Callable[[Message], str]
    shares: ShareCheck | None = field(init=False, default=None)
    screen_shares: ShareCheck | None = field(init=False, default=None)  # None: copies and floods not screened
    signing: bool = field(init=False, default=False)
    received: Received = field(init=False, default_factory=lambda: Received(rollouts=[]))
    deliveries: dict[tuple, tuple[int | None, list[int | None]]] = field(init=False, default_factory=dict)

    def __post_init__(self):
        p = self.protocol
        self.signing = p is not None and p.cfg.sign
        self.shares = ShareCheck(p.schedule, self.round_idx) if p is not None else None
        self.screen_shares = self.shares if self.signing or p is not None and p.cfg.enforce_shares else None


Rule = Callable[[Admission, Candidate], "str | None"]
PHASES = ("screen", "content", "slot")
"""When a rule runs, declared by each (:func:`rule`), in this order: ``screen`` reads no content, its
verdict is kept per distinct message value (:func:`screen`); ``content`` reads the content, an exception
in it is a ``decode:`` refusal; ``slot`` takes the sender's slot, so it runs last, outside that guard."""


def rule(phase: str) -> Callable[[Rule], Rule]:
    """Declare a rule's phase (one of :data:`PHASES`) on the function: ``rule.phase``."""
    def declare(fn: Rule) -> Rule:
        fn.phase = phase
        return fn
    return declare


# ---------------------------------------------------------------- before content (kept per message value)
@rule("screen")
def schema(a: Admission, c: Candidate) -> str | None:
    """Field types first: ``index=True`` or ``1.0`` would bind other seeds."""
    return parse_message(c.msg)[1]


@rule("screen")
def unsigned(a: Admission, c: Candidate) -> str | None:
    return "signature: unsigned message" if a.signing and c.msg.signature is None else None


@rule("screen")
def malformed(a: Admission, c: Candidate) -> str | None:
    """A signature spelled canonically, before any verification."""
    return MALFORMED_SIGNATURE if a.signing and canonical_hex(c.msg.signature, SIGNATURE_HEX) is None else None


@rule("screen")
def copy_of_verified(a: Admission, c: Candidate) -> str | None:
    """A copy of a message verified earlier in this receive (by digest): dropped unverified, no strike."""
    c.data = signed_bytes(c.msg) if a.screen_shares is not None or a.signing else b""
    c.digest = hashlib.sha256(c.data).hexdigest()  # = message_digest(msg)
    if a.screen_shares is not None and (c.digest, c.msg.node) in a.screen_shares.verified:
        c.signer = c.msg.node
        return "copy"
    return None


@rule("screen")
def signature(a: Admission, c: Candidate) -> str | None:
    """The roster key that signed it (verified once per digest) and for this run; an ``identity``
    refusal (its own key signed for another node) waits until round and flood are checked."""
    signer, reason = a.protocol.verifier.identify(c.msg, c.data) if a.signing else (c.msg.node, None)
    c.signer = signer
    if signer is not None and a.screen_shares is not None:
        if (c.digest, signer) in a.screen_shares.verified:  # (a copy of another's forgery: one strike, not one a copy)
            return "copy"
        a.screen_shares.verified.add((c.digest, signer))
    if signer is not None and reason is not None and reason.startswith("identity"):
        c.identity, reason = reason, None
    return reason


@rule("screen")
def round_(a: Admission, c: Candidate) -> str | None:
    if c.msg.round != a.round_idx:
        return f"round: message for round {c.msg.round} received in round {a.round_idx}"
    return None


@rule("screen")
def flood(a: Admission, c: Candidate) -> str | None:
    """At most ``FLOOD_FACTOR`` × its slots distinct messages per signer: the first excess ``flood``,
    the rest ``flooded`` (dropped unread)."""
    shares = a.screen_shares
    if shares is None or not a.protocol.cfg.enforce_shares:
        return None
    shares.signed[c.signer] += 1
    cap = FLOOD_FACTOR * shares.schedule.slots(c.signer)
    if shares.signed[c.signer] <= cap:
        return None
    return ("flooded" if shares.signed[c.signer] > cap + 1 else
            f"flood: node {c.signer} signed more than {cap} messages for round {a.round_idx} "
            f"({FLOOD_FACTOR} × its {cap // FLOOD_FACTOR} slots); the rest are dropped unread")


@rule("screen")
def identity(a: Admission, c: Candidate) -> str | None:
    """Its own key signed for another node of this run and round."""
    return c.identity


@rule("screen")
def banned(a: Admission, c: Candidate) -> str | None:
    p = a.protocol
    if p is not None and c.signer in p.bans.banned:
        return f"banned: node {c.signer} is banned since round {p.bans.banned[c.signer]}"
    return None


# ---------------------------------------------------------------- content
@rule("content")
def tokenizer(a: Admission, c: Candidate) -> str | None:
    """Homogeneous swarms: the receiver's own tokenizer."""
    p, policy = a.protocol, a.policy
    if p is not None and p.homogeneous and c.msg.tokenizer != policy.tokenizer_id:
        return (f"tokenizer: {ascii(c.msg.tokenizer)[:60]} is not the swarm's {policy.tokenizer_id!r} "
                "(a homogeneous swarm has one model)")
    return None


@rule("content")
def content(a: Admission, c: Candidate) -> str | None:
    """Schema, sizes, prompt, special tokens, vocabulary, consistency (:func:`dgrpo.swarm.validation.check_message`)."""
    return check_message(c.msg, sender=c.signer, round_idx=a.round_idx, prompt_ids=a.problems,
                         tokenizer=a.policy.tokenizer, tokenizer_id=a.policy.tokenizer_id, limits=a.limits)


@rule("content")
def seed(a: Admission, c: Candidate) -> str | None:
    """The claimed seed is the one the protocol assigns (``bind_seeds``)."""
    if a.protocol is None or not a.protocol.cfg.bind_seeds:
        return None
    bound = completion_seed(a.run_seed, a.round_idx, c.signer, c.msg.prompt_id, c.msg.index)
    return f"seed: claims seed {c.msg.seed} but the protocol assigns {bound}" if c.msg.seed != bound else None


@rule("content")
def share(a: Admission, c: Candidate) -> str | None:
    """A slot the schedule gives the sender, once (``enforce_shares``)."""
    if a.protocol is None or not a.protocol.cfg.enforce_shares:
        return None
    return a.shares.check(c.signer, c.msg)


@rule("content")
def decode(a: Admission, c: Candidate) -> str | None:
    """The rollout: the message's own ids, or its text re-encoded by a receiver with another tokenizer."""
    msg, policy = c.msg, a.policy
    ids = list(msg.token_ids) if msg.tokenizer == policy.tokenizer_id else encode_completion(policy.tokenizer, msg.text)
    bound = a.protocol is not None and a.protocol.cfg.bind_seeds
    s = completion_seed(a.run_seed, msg.round, c.signer, msg.prompt_id, msg.index) if bound else msg.seed
    c.rollout = Rollout(prompt_id=msg.prompt_id, prompt_ids=policy.prompt_ids(a.task, a.problems[msg.prompt_id]),
                        completion_ids=ids, text=msg.text, sender=c.signer, seed=s, key=msg.key, label=a.label(msg),
                        proof=msg.proof)
    return None


@rule("content")
def length(a: Admission, c: Candidate) -> str | None:
    """At most ``sampling.max_new_tokens`` completion tokens (``enforce_length``)."""
    p = a.protocol
    if p is None or not p.cfg.enforce_length:
        return None
    return p.length_reason(c.msg.tokenizer == a.policy.tokenizer_id, len(c.msg.token_ids), len(c.rollout.completion_ids))


@rule("slot")
def duplicate(a: Admission, c: Candidate) -> str | None:
    """The slot is taken; a text equal to another of the sender's in the round is counted, and
    refused with ``drop_duplicates``."""
    if a.shares is None:
        return None
    a.shares.accept(c.signer, c.msg)
    first = a.shares.duplicate_of(c.signer, c.msg)
    if first is None:
        return None
    a.received.duplicates[c.signer] += 1
    return f"duplicate: same text as index {first}" if a.protocol.cfg.drop_duplicates else None


RULES: tuple[Rule, ...] = (schema, unsigned, malformed, copy_of_verified, signature, round_, flood, identity, banned,
                           tokenizer, content, seed, share, decode, length, duplicate)
SCREENED = tuple(r for r in RULES if r.phase == "screen")  # before content: verdict kept per message value
CONTENT = tuple(r for r in RULES if r.phase == "content")  # inside the decode guard
SLOT = tuple(r for r in RULES if r.phase == "slot")  # (duplicate) once every other rule passed, outside the guard
if [r.phase for r in RULES] != sorted((r.phase for r in RULES), key=PHASES.index) or SCREENED + CONTENT + SLOT != RULES:
    raise ValueError("admission.RULES: list the rules by phase (screen, content, slot); each declares one of PHASES")


def refusal(a: Admission, c: Candidate, rules: Sequence[Rule]) -> str | None:
    """The reason of the first of ``rules`` that refuses ``c`` (the rest are not run), else None."""
    return next((r for rule in rules if (r := rule(a, c)) is not None), None)


def screen(a: Admission, c: Candidate) -> str | None:
    """The :data:`SCREENED` rules, once per distinct message value in a receive: a message equal in
    every field to one screened before gets its verdict again (``copy`` where that one had a signer)."""
    shares = a.shares
    try:
        seen = shares.screened.get(c.msg) if shares is not None else None
    except TypeError:  # an unhashable field (a list of token ids): screened in full, refused by schema
        seen = None
    if seen is not None:
        c.signer, c.group = seen[0], seen[2]
        return "copy" if seen[0] is not None else seen[1]
    reason = refusal(a, c, SCREENED)
    c.group = (c.digest, c.signer) if c.data else ("object", id(c.msg))
    if shares is not None and reason != "flooded":
        try:
            shares.screened[c.msg] = (c.signer, reason, c.group)
        except TypeError:
            pass
    return reason


def admit(a: Admission, messages: Sequence[Message], carriers: Mapping[int, int]) -> Received:
    """Run :data:`RULES` on every message of ``messages`` and :func:`complete_shares` on the round.

    Args:
        carriers: ``id(message)`` → the node that delivered it, where known (accounting only:
            ``Received.carried``, never a strike).

    Returns:
        The rollouts accepted (not yet rewarded) and every refusal with its reason.
    """
    received, kept = a.received, []
    for msg in messages:
        c = Candidate(msg)
        try:
            reason = screen(a, c) or refusal(a, c, CONTENT)  # (the slot rules, below)
        except Exception as err:  # noqa: BLE001 - a peer's bytes must never crash the round
            reason = f"decode: {type(err).__name__}: {str(err)[:80]!r}"
        rule = reason.split(":", 1)[0] if reason is not None else None
        carrier = carriers.get(id(msg))
        if rule == "copy" or rule != "flooded" and c.group and c.signer is not None and c.group not in a.deliveries:
            a.deliveries.setdefault(c.group, (c.signer, []))[1].append(carrier)  # (named at the end: name_copies)
        if rule == "flooded":  # not read by the round: named under who delivered it (else its signer)
            received.carried.append((c.signer if carrier is None else carrier, rule))
        elif carrier is not None and carrier != c.signer and rule in DROPPED - {"copy"}:  # another's message
            received.carried.append((carrier, rule))
        if rule == "copy":
            received.copies += 1
            continue
        if rule == "flooded":  # the excess beyond the one `flood` refusal, dropped unread
            received.flooded[c.signer] += 1
            continue
        if reason is None:
            reason = refusal(a, c, SLOT)  # (outside the decode guard, as the slot is now taken)
        if reason is not None:
            log.warning("rejected message from node %s (%s): %s", "unsigned" if c.signer is None else c.signer,
                        ascii(msg.prompt_id)[1:41].rstrip("'"), reason)
            received.invalid.append((msg, reason))
            received.signers.append(c.signer)
            continue
        received.rollouts.append(c.rollout)
        received.admitted.append(msg)
        kept.append((msg, c.signer))
    name_copies(a)
    complete_shares(a, kept)
    return received


def name_copies(a: Admission) -> None:
    """Name each ``copy`` (never a strike) in ``Received.carried``: of n deliveries of one signed content, n - 1 are
    named under who delivered them (unknown: the signer), never the signer's own while another node delivered it
    (review r31i F3: a low rank forwarding its peers' messages first had the honest signers named ``copy``)."""
    for signer, delivered in a.deliveries.values():
        who = [signer if d is None else d for d in delivered]
        own = who.count(signer)
        named = [d for d in who if d != signer] + [signer] * (own - 1) if own else who[1:]
        a.received.carried.extend((d, "copy") for d in named)


def complete_shares(a: Admission, kept: list[tuple[Message, int]]) -> None:
    """The round's last rule (``complete_shares``): refuse every accepted completion of a prompt whose
    sender did not fill its slots (its whole share, where the round fixes its prompts)."""
    p, shares, received = a.protocol, a.shares, a.received
    if shares is None or not p.cfg.complete_shares or not (gaps := shares.incomplete([(n, m.prompt_id) for m, n in kept])):
        return
    whole = [(n, m.prompt_id) not in gaps for m, n in kept]
    for (m, n), ok in zip(kept, whole):
        if not ok:
            received.invalid.append((m, gaps[(n, m.prompt_id)]))
            received.signers.append(n)
    received.rollouts = [r for r, ok in zip(received.rollouts, whole) if ok]
    received.admitted = [m for m, ok in zip(received.admitted, whole) if ok]
