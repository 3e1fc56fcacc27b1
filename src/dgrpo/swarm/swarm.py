"""The nodes a process hosts and what the swarm does with messages, each job in its own place.

Homogeneous swarms keep one :class:`Policy` for all honest nodes: they start from the same weights,
receive the same messages and compute the same update, so m honest nodes cost one model, and their
generation is one batch. Heterogeneous swarms give each node its own policy.

:class:`Swarm` is what the recipe's round calls, one method a line of the paper:

    write    honest nodes sample, malicious nodes ask their attack; every message signed   (here)
    route    what a hosted protocol attacker sends each receiver, chosen by the attack      (swarm/routing.py)
    receive  the protocol's admission rules, in order; what passes becomes a rollout        (swarm/admission.py)
    reward   the task's verifiable rewards of the rollouts                                  (tasks/base.py)

It also keeps the last round's gathered messages for an attacker that re-sends them (the replay
memory a checkpoint saves). Defenses and the update are the recipe's (:mod:`dgrpo.recipes.swarm_round`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

from dgrpo.policy.chat import encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import completion_seed
from dgrpo.swarm.admission import Admission, Received, admit
from dgrpo.swarm.protocol import Protocol
from dgrpo.swarm.routing import route
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.base import Task, reward_rollouts
from dgrpo.types import AttackContext, Message, Problem, Rollout, Slot

if TYPE_CHECKING:
    from dgrpo.attacks.base import Attack
    from dgrpo.defenses.base import Defense
    from dgrpo.grpo.learner import Learner

log = logging.getLogger(__name__)
__all__ = ["Received", "Swarm"]


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
        self.alternatives: dict[int, list[Message]] = {}  # attacker declaring wants_alternative → honest samples of its slots
        self.gathered: dict[int, list[Message]] = {}  # round → every message gathered (the last two rounds: replay memory)
        # id(message) → the node that delivered it, where known: route() for a hosted attacker, a transport's
        # store key (distributed); accounting only (Received.carried), never a strike: any rank writes any key
        self.carriers: dict[int, int] = {}
        # what a defense asks every sender to attach (DefenseConfig.sender_proof; the build sets it): TOPLOC
        # proofs of the hidden states behind each completion, built by honest nodes while sampling and by
        # attackers by prefilling what they send (dgrpo.policy.proofs)
        self.prover = None
        # every malicious node of the run (swarm.malicious; the build sets it), not only those hosted here: a message
        # of a malicious sender that reached this process without its own label (relayed: the label is taken only
        # from the signer's own server) is "malicious", never counted honest (review r31o H6)
        self.malicious: frozenset[int] = frozenset(attacks)

    def label(self, msg: Message) -> str:
        """The simulation's truth for ``msg`` (metrics only: ``honest`` / ``poisoned`` / ``malicious``): the label
        route() gave it (this process's own attack), else the label its signer's server served, never ``honest``
        for a malicious sender's (its claim: ``poisoned`` or filler, ``malicious``, which is left out of both a
        defense's detection and its false-positive rate), else ``honest`` for an honest sender's and ``malicious``
        for a malicious sender's. Review r31o H6: a rank that hid its payload from the main made its poisons count
        as honest rejections there; r31p P1: a rank that served them labelled ``honest`` did the same."""
        routed = self.routed_labels.get(msg)
        if routed:
            return routed
        served = self.labels.get(msg.key)
        if msg.node in self.malicious:
            return served if served in ("poisoned", "malicious") else "malicious"
        return served or "honest"

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
            results = self._generate(policy, [s.problem for _, s, _ in requests], seeds)
            for (node, slot, i), seed, (ids, text, proof) in zip(requests, seeds, results):
                msg = self.sign(Message(node, round_idx, slot.problem.prompt_id, i, text, tuple(ids), seed,
                                        policy.tokenizer_id, proof=proof))
                out.setdefault(node, []).append(msg)
                self.labels[msg.key] = "honest"
        for node, attack in self.attacks.items():
            if node not in slots:
                continue
            policy = self.attacker_policies[node]
            ctx = self.attack_context(node, round_idx)
            for slot, poisons in zip(slots[node], attack.write(slots[node], ctx)):
                poisons = list(poisons)[: slot.count]
                # an adaptive attacker sends the ids and seed it sampled (Poison.token_ids, .seed)
                ids_of = [list(p.token_ids) if p.token_ids is not None else encode_completion(policy.tokenizer, p.text)
                          for p in poisons]
                proofs = self._prefill_proofs(policy, slot.problem, ids_of)
                for i, poison, ids, proof in zip(range(slot.first, slot.first + slot.count), poisons, ids_of, proofs):
                    seed = completion_seed(self.run_seed, round_idx, node, slot.problem.prompt_id, i)
                    if poison.seed is not None:
                        seed = poison.seed
                    msg = self.sign(Message(node, round_idx, slot.problem.prompt_id, i, poison.text, tuple(ids), seed,
                                            policy.tokenizer_id, proof=proof))
                    out.setdefault(node, []).append(msg)
                    self.labels[msg.key] = poison.label
            if attack.wants_alternative:
                self.alternatives[node] = self._honest_samples(node, policy, out.get(node, []))
        return out

    def _honest_samples(self, node: int, policy: Policy, own: Sequence[Message]) -> list[Message]:
        """What ``node`` would have sent honestly in the slots of ``own``: a sample from the assigned seed each."""
        seeds = [completion_seed(self.run_seed, m.round, node, m.prompt_id, m.index) for m in own]
        results = self._generate(policy, [self.problems[m.prompt_id] for m in own], seeds)
        return [Message(node, m.round, m.prompt_id, m.index, text, tuple(ids), seed, policy.tokenizer_id, proof=proof)
                for m, seed, (ids, text, proof) in zip(own, seeds, results)]

    def _generate(self, policy: Policy, problems: list[Problem], seeds: list[int]) -> list[tuple[list[int], str, str]]:
        """(ids, text, TOPLOC proof) per request: proved while sampling when a defense asks for proofs, else ""."""
        if self.prover is not None:
            return policy.generate_proved(self.task, problems, seeds, self.prover)
        return [(ids, text, "") for ids, text in policy.generate(self.task, problems, seeds)]

    def _prefill_proofs(self, policy: Policy, problem: Problem, completions: list[list[int]]) -> list[str]:
        """An attacker's TOPLOC proofs of what it sends (one prefill with the weights it holds), or "" each."""
        if self.prover is None or not completions:
            return [""] * len(completions)
        from dgrpo.policy.proofs import prove_by_prefill

        return prove_by_prefill(policy.model, policy.prompt_ids(self.task, problem), completions,
                                policy.tokenizer.pad_token_id, self.prover)

    def route(self, messages: Sequence[Message], receiver: int, round_idx: int) -> list[Message]:
        """The messages ``receiver`` (an honest node id, see :attr:`trained`) gets in round ``round_idx``.

        ``messages`` as gathered, except a hosted attacker that declares ``routes`` (a protocol attack,
        :mod:`dgrpo.attacks.protocol`): its own messages are replaced by what its ``send`` chooses for
        this receiver (forged senders, flooded copies, the previous round's messages re-sent, per-peer
        content), each re-signed with the attacker's own key (it holds no other), or, for a ``replay``
        attack, others' signed messages as they are (:func:`dgrpo.swarm.routing.route`), each with the
        label the attack gives it (``routed_labels``). A homogeneous
        swarm's honest nodes share one policy, which gets the view of its owner (the lowest id).
        Other receivers (an attacker's mirror) get ``messages`` unchanged.

        Returns:
            the other nodes' messages in the gathered order, then the attacker's.
        """
        return route(self, messages, receiver, round_idx)

    @property
    def keeps_replay_memory(self) -> bool:
        """Whether a hosted attacker declares ``wants_seen`` (it re-sends the last round's messages)."""
        return any(a.wants_seen for a in self.attacks.values())

    def replay_memory(self, round_idx: int) -> list[Message] | None:
        """The messages gathered in ``round_idx`` when a hosted attacker re-sends them next round
        (``replayed_round``), else None: what a checkpoint keeps so a resumed run replays the same."""
        return self.gathered.get(round_idx, []) if self.keeps_replay_memory else None

    def restore_replay_memory(self, round_idx: int, messages: Sequence[Message]) -> None:
        """Set the messages gathered in ``round_idx`` (a resumed run's, from its checkpoint)."""
        self.gathered = {round_idx: list(messages)}

    def sign_as(self, node: int, msg: Message) -> Message:
        """``msg`` signed with ``node``'s key (whatever node it names), when signing is on."""
        p = self.protocol
        if p is None or not p.cfg.sign or node not in p.signers:
            return msg
        return p.signers[node].sign(msg)

    def sign(self, msg: Message) -> Message:
        """``msg`` signed by its node's key when this process holds it and signing is on."""
        return self.sign_as(msg.node, msg)

    # ------------------------------------------------------------------ receive (Alg. 1 L9, Alg. 2 L8)
    def receive(self, policy: Policy, messages: Sequence[Message], round_idx: int) -> Received:
        """The protocol's admission (:mod:`dgrpo.swarm.admission`: its rules in order, each refusal with
        its reason) of every message, for ``policy``; what passes becomes a rollout, not yet rewarded.
        The round always completes: any exception on the way is a refusal (``decode: ...``)."""
        admission = Admission(self.protocol, policy, round_idx, self.problems, self.limits, self.run_seed, self.task,
                              self.label)
        received = admit(admission, messages, self.carriers)
        self.last_received[policy] = received
        return received

    def reward(self, rollouts: Sequence[Rollout]) -> list[Rollout]:
        """Set every rollout's verifiable reward (:func:`dgrpo.tasks.base.reward_rollouts`); returns them."""
        return reward_rollouts(self.task, self.problems, rollouts)
