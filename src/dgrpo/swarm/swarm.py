"""The nodes a process hosts and the two things they do with messages: write them, receive them.

Homogeneous swarms keep one :class:`Policy` for all honest nodes: they start from the same weights,
receive the same messages and compute the same update, so m honest nodes cost one model, and their
generation is one batch. Heterogeneous swarms give each node its own policy.

What a node does with the rollouts it receives (rewards, defenses, update) is the recipe's round
(:mod:`dgrpo.recipes.horizontal`); this module only writes, validates and turns messages into rollouts.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from dgrpo.policy.chat import encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import completion_seed
from dgrpo.swarm.identity import MALFORMED_SIGNATURE, SIGNATURE_HEX, canonical_hex, signed_bytes
from dgrpo.swarm.protocol import DROPPED, FLOOD_FACTOR, Protocol, ShareCheck
from dgrpo.swarm.routing import route
from dgrpo.swarm.validation import Limits, check_message, parse_message
from dgrpo.tasks.base import Task
from dgrpo.types import AttackContext, Message, Problem, Rollout, Slot

if TYPE_CHECKING:
    from dgrpo.attacks.base import Attack
    from dgrpo.defenses.base import Defense
    from dgrpo.grpo.learner import Learner

log = logging.getLogger(__name__)


@dataclass
class Received:
    """One policy's view of a round's messages: the rollouts it accepted and the messages it refused.

    Attributes:
        rollouts: accepted messages as rollouts (sender = the node whose key signed it).
        invalid: (message, reason) of every refused message.
        signers: for each refused message, the node it is attributed to (the key that signed it;
            None: no roster key did, "unsigned").
        duplicates: sender → completions whose text repeats another of its slots in the round.
        copies: copies (same :func:`~dgrpo.swarm.identity.message_digest`, whatever the signature's
            spelling) of a message verified earlier in the receive, dropped without a strike.
        flooded: signer → its messages beyond ``FLOOD_FACTOR`` × its slots after the one ``flood``
            refusal, dropped unread.
        carried: (carrier, rule) of each message dropped without a strike (``DROPPED``) that a known
            node delivered (:attr:`Swarm.carriers`): names who replayed or re-spelled a signed message.
    """

    rollouts: list[Rollout]
    invalid: list[tuple[Message, str]] = field(default_factory=list)
    signers: list[int | None] = field(default_factory=list)
    duplicates: Counter = field(default_factory=Counter)
    copies: int = 0
    flooded: Counter = field(default_factory=Counter)
    carried: list[tuple[int, str]] = field(default_factory=list)


class Swarm:
    """Nodes hosted by this process.

    Args:
        task: the task every node trains on.
        policies: honest node id → policy (the same object for all honest nodes when homogeneous).
        attacks: malicious node id → attack.
        attacker_policies: malicious node id → policy the attacker holds (tokenizer, weights).
        learners: trained policy → its learner (honest policies, and the attacker's mirror).
        defenses: owner node id (see :attr:`trained`) → defenses it runs, in order.
        run_seed: the run seed (sampling seeds derive from it).
        group_size: G.
        limits: message size limits.
        mode: ``horizontal`` or ``vertical`` (what attackers know).
        protocol: signing keys of the hosted nodes and the rules receivers enforce
            (:mod:`dgrpo.swarm.protocol`); None = no signatures and no schedule rules, the claimed
            ``node`` is trusted (component tests only: every run builds one).
    """

    def __init__(self, task: Task, policies: dict[int, Policy], attacks: dict[int, "Attack"],
                 attacker_policies: dict[int, Policy], learners: dict[Policy, "Learner"],
                 defenses: dict[int, list["Defense"]], run_seed: int, group_size: int, limits: Limits,
                 mode: str = "horizontal", protocol: Protocol | None = None):
        self.protocol = protocol
        self.task, self.policies, self.attacks = task, policies, attacks
        self.attacker_policies, self.learners, self.defenses = attacker_policies, learners, defenses
        self.run_seed, self.group_size, self.limits, self.mode = run_seed, group_size, limits, mode
        # the training pool only: a message for a held-out prompt is refused on receipt (unknown prompt), or a
        # vertical attacker could train the swarm on the prompts its ASR and accuracy are measured on
        self.problems: dict[str, Problem] = {p.prompt_id: p for p in task.train}
        self.last_received: dict[Policy, Received] = {}  # each trained policy's last receive (per-peer accounting)
        self.labels: dict[tuple, str] = {}  # message key → honest / poisoned / malicious (simulation truth)
        self.routed_labels: dict[Message, str] = {}  # labels of the messages route() made (their keys may repeat)
        self._alternative: dict[int, list[Message]] = {}  # protocol attacker → honest samples of its slots
        self._gathered: dict[int, list[Message]] = {}  # round → every message gathered (replayed rounds)
        # id(message) → the node that delivered it, where known: route() for a hosted attacker, a transport's
        # store key (distributed); accounting only (Received.carried), never a strike: any rank writes any key
        self.carriers: dict[int, int] = {}

    @property
    def hosted(self) -> list[int]:
        """Ids of the nodes this process hosts, honest and malicious."""
        return sorted({*self.policies, *self.attacks})

    @property
    def honest_policies(self) -> dict[int, Policy]:
        """Distinct honest policies, keyed by the lowest node id that holds each."""
        seen: dict[int, Policy] = {}
        for node in sorted(self.policies):
            if all(p is not self.policies[node] for p in seen.values()):
                seen[node] = self.policies[node]
        return seen

    @property
    def mirror_policies(self) -> dict[int, Policy]:
        """Trained attacker policies that no honest node here holds, keyed by attacker node id.

        A homogeneous swarm's attacker knows the honest weights; alone in its process (a distributed
        rank) it keeps them by replaying the honest update on the messages it receives.
        """
        return {n: p for n, p in self.attacker_policies.items()
                if p in self.learners and all(p is not q for q in self.policies.values())}

    @property
    def trained(self) -> dict[int, Policy]:
        """Every policy this process trains, keyed by its owner: the honest ones, then mirrors."""
        return {**self.honest_policies, **self.mirror_policies}

    def holders(self, policy: Policy) -> list[int]:
        """Honest node ids that hold ``policy``."""
        return [n for n, p in self.policies.items() if p is policy]

    # ------------------------------------------------------------------ write (Alg. 1 L5, Alg. 2 L5)
    def attack_context(self, node: int, round_idx: int) -> AttackContext:
        """What the attacker at ``node`` knows in round ``round_idx`` (its weights, the run seed, the length rule)."""
        limit = self.protocol.max_new_tokens if self.protocol is not None and self.protocol.cfg.enforce_length else None
        return AttackContext(self.task, round_idx, node, self.group_size, self.mode, self.run_seed,
                             self.attacker_policies[node], limit)

    def write(self, slots: dict[int, Sequence[Slot]], round_idx: int) -> dict[int, list[Message]]:
        """Every hosted node writes its completions for its slots.

        Honest nodes sharing a policy generate in one batch (per-sequence seeds make this identical
        to generating node by node, docs/verification.md). Malicious nodes ask their attack.
        """
        out: dict[int, list[Message]] = {}
        for owner, policy in self.honest_policies.items():
            requests = [(node, slot, i) for node in self.holders(policy) if node in slots
                        for slot in slots[node] for i in range(slot.first, slot.first + slot.count)]
            seeds = [completion_seed(self.run_seed, round_idx, n, s.problem.prompt_id, i) for n, s, i in requests]
            results = policy.generate(self.task, [s.problem for _, s, _ in requests], seeds)
            for (node, slot, i), seed, (ids, text) in zip(requests, seeds, results):
                msg = self.sign(Message(node, round_idx, slot.problem.prompt_id, i, text, tuple(ids), seed,
                                        policy.tokenizer_id))
                out.setdefault(node, []).append(msg)
                self.labels[msg.key] = "honest"
        for node, attack in self.attacks.items():
            if node not in slots:
                continue
            policy = self.attacker_policies[node]
            ctx = self.attack_context(node, round_idx)
            for slot, poisons in zip(slots[node], attack.write(slots[node], ctx)):
                for i, poison in zip(range(slot.first, slot.first + slot.count), poisons):
                    ids = encode_completion(policy.tokenizer, poison.text)
                    seed = completion_seed(self.run_seed, round_idx, node, slot.problem.prompt_id, i)
                    # an adaptive attacker (attacks.base.ClaimedPoison) sends the ids and seed it sampled
                    if getattr(poison, "token_ids", None) is not None:
                        ids = list(poison.token_ids)
                    if getattr(poison, "seed", None) is not None:
                        seed = poison.seed
                    msg = self.sign(Message(node, round_idx, slot.problem.prompt_id, i, poison.text, tuple(ids), seed,
                                            policy.tokenizer_id))
                    out.setdefault(node, []).append(msg)
                    self.labels[msg.key] = poison.label
            if getattr(attack, "wants_alternative", False):
                self._alternative[node] = self._honest_samples(node, policy, out.get(node, []))
        return out

    def _honest_samples(self, node: int, policy: Policy, own: Sequence[Message]) -> list[Message]:
        """What ``node`` would have sent honestly in the slots of ``own``: a sample from the assigned seed each."""
        seeds = [completion_seed(self.run_seed, m.round, node, m.prompt_id, m.index) for m in own]
        results = policy.generate(self.task, [self.problems[m.prompt_id] for m in own], seeds)
        return [Message(node, m.round, m.prompt_id, m.index, text, tuple(ids), seed, policy.tokenizer_id)
                for m, seed, (ids, text) in zip(own, seeds, results)]

    def route(self, messages: Sequence[Message], receiver: int, round_idx: int) -> list[Message]:
        """The messages ``receiver`` (an honest node id, see :attr:`trained`) gets in round ``round_idx``.

        ``messages`` as gathered, except a hosted protocol attacker (:mod:`dgrpo.attacks.protocol`):
        its own messages are replaced by what its ``messages`` sends this receiver (forged senders,
        flooded copies, the previous round's messages re-sent, per-peer content), each re-signed
        with the attacker's own key (it holds no other), or, for a ``replay`` attack, others' signed
        messages as they are (:func:`dgrpo.swarm.routing.route`). Each keeps the label its slot was written
        with (a forged or flooded copy of filler is filler), another node's message re-sent is
        ``poisoned`` and an equivocator's honest variant ``honest``. A homogeneous
        swarm's honest nodes share one policy, which gets the view of its owner (the lowest id).
        Other receivers (an attacker's mirror) get ``messages`` unchanged.

        Returns:
            the other nodes' messages in the gathered order, then the attacker's.
        """
        return route(self, messages, receiver, round_idx)

    @property
    def keeps_replay_memory(self) -> bool:
        """Whether a hosted attacker re-sends the last round's messages (``replayed_round``)."""
        return any(getattr(a, "wants_seen", False) for a in self.attacks.values())

    def replay_memory(self, round_idx: int) -> list[Message] | None:
        """The messages gathered in ``round_idx`` when a hosted attacker re-sends them next round
        (``replayed_round``), else None: what a checkpoint keeps so a resumed run replays the same."""
        return self._gathered.get(round_idx, []) if self.keeps_replay_memory else None

    def restore_replay_memory(self, round_idx: int, messages: Sequence[Message]) -> None:
        """Set the messages gathered in ``round_idx`` (a resumed run's, from its checkpoint)."""
        self._gathered = {round_idx: list(messages)}

    def _sign_as(self, node: int, msg: Message) -> Message:
        """``msg`` signed with ``node``'s key (whatever node it names), when signing is on."""
        p = self.protocol
        if p is None or not p.cfg.sign or node not in p.signers:
            return msg
        return p.signers[node].sign(msg)

    def sign(self, msg: Message) -> Message:
        """``msg`` signed by its node's key when this process holds it and signing is on."""
        p = self.protocol
        if p is None or not p.cfg.sign or msg.node not in p.signers:
            return msg
        return p.signers[msg.node].sign(msg)

    # ------------------------------------------------------------------ receive (Alg. 1 L9, Alg. 2 L8)
    def receive(self, policy: Policy, messages: Sequence[Message], round_idx: int) -> Received:
        """Check every message (:mod:`dgrpo.swarm.protocol`: :meth:`_screen` first (schema, signature,
        run, round, copy, flood, identity, ban), then :func:`dgrpo.swarm.validation.check_message`, seed,
        share, length) and turn those that pass into rollouts for ``policy``, not yet rewarded. Any
        exception on the way is a refusal with its reason (``decode: ...``): the round always completes."""
        received, kept = Received(rollouts=[]), []
        p = self.protocol
        shares = ShareCheck(p.schedule, round_idx) if p is not None else None
        for msg in messages:
            signer, carrier = None, self.carriers.get(id(msg))
            try:
                signer, reason = self._screen(msg, round_idx, shares)
                if reason is None:
                    reason = self._check(policy, msg, signer, round_idx, shares)
                if reason is None:
                    rollout = self._rollout(policy, msg, signer)
                    if p is not None and p.cfg.enforce_length:
                        reason = p.length_reason(msg.tokenizer == policy.tokenizer_id, len(msg.token_ids),
                                                 len(rollout.completion_ids))
            except Exception as err:  # noqa: BLE001 - a peer's bytes must never crash the round
                reason = f"decode: {type(err).__name__}: {str(err)[:80]!r}"
            rule = reason.split(":", 1)[0] if reason is not None else None
            if carrier is not None and carrier != signer and rule in DROPPED:  # who delivered another's message
                received.carried.append((carrier, rule))
            if rule == "copy":
                received.copies += 1
                continue
            if rule == "flooded":  # the excess beyond the one `flood` refusal, dropped unread
                received.flooded[signer] += 1
                continue
            if reason is None and shares is not None:
                shares.accept(signer, msg)
                first = shares.duplicate_of(signer, msg)
                if first is not None:
                    received.duplicates[signer] += 1
                    if p.cfg.drop_duplicates:
                        reason = f"duplicate: same text as index {first}"
            if reason is not None:
                log.warning("rejected message from node %s (%s): %s", "unsigned" if signer is None else signer,
                            ascii(msg.prompt_id)[1:41].rstrip("'"), reason)
                received.invalid.append((msg, reason))
                received.signers.append(signer)
                continue
            received.rollouts.append(rollout)
            kept.append((msg, signer))
        if shares is not None and p.cfg.complete_shares and (gaps := shares.incomplete([(n, m.prompt_id) for m, n in kept])):
            whole = [(n, m.prompt_id) not in gaps for m, n in kept]
            for (m, n), ok in zip(kept, whole):
                if not ok:
                    received.invalid.append((m, gaps[(n, m.prompt_id)]))
                    received.signers.append(n)
            received.rollouts = [r for r, ok in zip(received.rollouts, whole) if ok]
        self.last_received[policy] = received
        return received

    def _screen(self, msg: Message, round_idx: int, shares: ShareCheck | None) -> tuple[int | None, str | None]:
        """:meth:`_screen_once`, once per distinct message object value in a receive: a message equal in every
        field to one screened before gets its verdict again (``copy`` where that one was verified), at the
        cost of a hash (a flood of identical copies costs no parse, digest nor verification)."""
        try:
            seen = shares.screened.get(msg) if shares is not None else None
        except TypeError:  # an unhashable field (a list of token ids): screened in full, refused by schema
            seen = None
        if seen is not None:
            return seen[0], "copy" if seen[0] is not None else seen[1]
        signer, reason = self._screen_once(msg, round_idx, shares)
        if shares is not None and reason != "flooded":
            try:
                shares.screened[msg] = (signer, reason)
            except TypeError:
                pass
        return signer, reason

    def _screen_once(self, msg: Message, round_idx: int, shares: ShareCheck | None) -> tuple[int | None, str | None]:
        """(signer, reason) of the checks that come before a message's content (docs/protocol.md, the strike
        table): schema; a signature spelled canonically (``malformed``, before any verification); a copy of
        a message verified earlier in this receive (by :func:`message_digest`, ``copy``); the signature
        (verified once per digest); the run; the round; at most ``FLOOD_FACTOR`` × its slots distinct
        messages per signer (the first excess ``flood``, the rest ``flooded``, dropped unread); ``identity``;
        a ban. None as reason: go on with :meth:`_check`."""
        reason = parse_message(msg)[1]  # types first: index=True or 1.0 would bind other seeds
        p = self.protocol
        if reason is not None:
            return None, reason
        signing = p is not None and p.cfg.sign
        if signing and msg.signature is None:
            return None, "signature: unsigned message"
        if signing and canonical_hex(msg.signature, SIGNATURE_HEX) is None:
            return None, MALFORMED_SIGNATURE
        if not (signing or p is not None and p.cfg.enforce_shares):
            shares = None  # the paper's unprotected swarm (rules off): copies and floods reach the defenses
        data = signed_bytes(msg) if shares is not None or signing else b""
        digest = hashlib.sha256(data).hexdigest()  # = message_digest(msg)
        if shares is not None and (digest, msg.node) in shares.verified:  # a copy of a genuine message: unverified
            return msg.node, "copy"
        signer, reason = p.verifier.identify(msg, data) if signing else (msg.node, None)
        if signer is not None and shares is not None:
            if (digest, signer) in shares.verified:  # (a copy of another's forgery: one strike, not one a copy)
                return signer, "copy"
            shares.verified.add((digest, signer))
        if signer is None or reason is not None and not reason.startswith("identity"):
            return signer, reason
        if msg.round != round_idx:
            return signer, f"round: message for round {msg.round} received in round {round_idx}"
        if shares is not None and p.cfg.enforce_shares:
            shares.signed[signer] += 1
            cap = FLOOD_FACTOR * shares.schedule.slots(signer)
            if shares.signed[signer] > cap:
                return signer, ("flooded" if shares.signed[signer] > cap + 1 else
                                f"flood: node {signer} signed more than {cap} messages for round {round_idx} "
                                f"({FLOOD_FACTOR} × its {cap // FLOOD_FACTOR} slots); the rest are dropped unread")
        if reason is not None:  # identity: its own key signed for another node of this run and round
            return signer, reason
        if p is not None and signer in p.bans.banned:
            return signer, f"banned: node {signer} is banned since round {p.bans.banned[signer]}"
        return signer, None

    def _check(self, policy: Policy, msg: Message, sender: int, round_idx: int, shares: ShareCheck | None) -> str | None:
        p = self.protocol
        if p is not None and p.homogeneous and msg.tokenizer != policy.tokenizer_id:
            return (f"tokenizer: {ascii(msg.tokenizer)[:60]} is not the swarm's {policy.tokenizer_id!r} "
                    "(a homogeneous swarm has one model)")
        reason = check_message(msg, sender=sender, round_idx=round_idx, prompt_ids=self.problems,
                               tokenizer=policy.tokenizer, tokenizer_id=policy.tokenizer_id, limits=self.limits)
        if reason is not None or p is None:
            return reason
        if p.cfg.bind_seeds:
            bound = completion_seed(self.run_seed, round_idx, sender, msg.prompt_id, msg.index)
            if msg.seed != bound:
                return f"seed: claims seed {msg.seed} but the protocol assigns {bound}"
        if p.cfg.enforce_shares:
            return shares.check(sender, msg)
        return None

    def _rollout(self, policy: Policy, msg: Message, sender: int) -> Rollout:
        problem = self.problems[msg.prompt_id]
        ids = list(msg.token_ids) if msg.tokenizer == policy.tokenizer_id else encode_completion(policy.tokenizer, msg.text)
        bound = self.protocol is not None and self.protocol.cfg.bind_seeds
        seed = completion_seed(self.run_seed, msg.round, sender, msg.prompt_id, msg.index) if bound else msg.seed
        return Rollout(prompt_id=msg.prompt_id, prompt_ids=policy.prompt_ids(self.task, problem), completion_ids=ids,
                       text=msg.text, sender=sender, seed=seed, key=msg.key,
                       label=self.routed_labels.get(msg) or self.labels.get(msg.key, "honest"))

    def reward(self, rollouts: Sequence[Rollout]) -> list[Rollout]:
        """Set every rollout's verifiable reward (the task's rewards of their texts, in one call so a
        task that runs programs can run them several at a time); returns them."""
        rollouts = list(rollouts)
        rewards = self.task.rewards([r.text for r in rollouts], [self.problems[r.prompt_id] for r in rollouts])
        for r, reward in zip(rollouts, rewards):
            r.reward = reward
        return rollouts
