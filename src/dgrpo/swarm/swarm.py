"""The nodes a process hosts and the two things they do with messages: write them, receive them.

Homogeneous swarms keep one :class:`Policy` for all honest nodes: they start from the same weights,
receive the same messages and compute the same update, so m honest nodes cost one model, and their
generation is one batch. Heterogeneous swarms give each node its own policy.

What a node does with the rollouts it receives (rewards, defenses, update) is the recipe's round
(:mod:`dgrpo.recipes.horizontal`); this module only writes, validates and turns messages into rollouts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from dgrpo.policy.chat import encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import completion_seed
from dgrpo.swarm.validation import Limits, check_message
from dgrpo.tasks.base import Task
from dgrpo.types import AttackContext, Message, Problem, Rollout, Slot

if TYPE_CHECKING:
    from dgrpo.attacks.base import Attack
    from dgrpo.defenses.base import Defense
    from dgrpo.grpo.learner import Learner

log = logging.getLogger(__name__)


@dataclass
class Received:
    """One policy's view of a round's messages: the rollouts it accepted and the messages it refused."""

    rollouts: list[Rollout]
    invalid: list[tuple[Message, str]] = field(default_factory=list)


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
    """

    def __init__(self, task: Task, policies: dict[int, Policy], attacks: dict[int, "Attack"],
                 attacker_policies: dict[int, Policy], learners: dict[Policy, "Learner"],
                 defenses: dict[int, list["Defense"]], run_seed: int, group_size: int, limits: Limits,
                 mode: str = "horizontal"):
        self.task, self.policies, self.attacks = task, policies, attacks
        self.attacker_policies, self.learners, self.defenses = attacker_policies, learners, defenses
        self.run_seed, self.group_size, self.limits, self.mode = run_seed, group_size, limits, mode
        self.problems: dict[str, Problem] = {p.prompt_id: p for p in [*task.train, *task.val]}
        self.labels: dict[tuple, str] = {}  # message key → honest / poisoned / malicious (simulation truth)

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
                msg = Message(node, round_idx, slot.problem.prompt_id, i, text, tuple(ids), seed, policy.tokenizer_id)
                out.setdefault(node, []).append(msg)
                self.labels[msg.key] = "honest"
        for node, attack in self.attacks.items():
            if node not in slots:
                continue
            policy = self.attacker_policies[node]
            ctx = AttackContext(self.task, round_idx, node, self.group_size, self.mode, self.run_seed, policy)
            for slot, poisons in zip(slots[node], attack.write(slots[node], ctx)):
                for i, poison in zip(range(slot.first, slot.first + slot.count), poisons):
                    ids = encode_completion(policy.tokenizer, poison.text)
                    seed = completion_seed(self.run_seed, round_idx, node, slot.problem.prompt_id, i)
                    msg = Message(node, round_idx, slot.problem.prompt_id, i, poison.text, tuple(ids), seed,
                                  policy.tokenizer_id)
                    out.setdefault(node, []).append(msg)
                    self.labels[msg.key] = poison.label
        return out

    # ------------------------------------------------------------------ receive (Alg. 1 L9, Alg. 2 L8)
    def receive(self, policy: Policy, messages: Sequence[Message], round_idx: int) -> Received:
        """Validate messages (:func:`dgrpo.swarm.validation.check_message`) and turn those that pass
        into rollouts for ``policy``, not yet rewarded."""
        received = Received(rollouts=[])
        for msg in messages:
            reason = check_message(msg, sender=msg.node, round_idx=round_idx, prompt_ids=self.problems,
                                   tokenizer=policy.tokenizer, tokenizer_id=policy.tokenizer_id, limits=self.limits)
            if reason is not None:
                log.warning("rejected message from node %s (%s): %s", msg.node, msg.prompt_id, reason)
                received.invalid.append((msg, reason))
                continue
            problem = self.problems[msg.prompt_id]
            ids = list(msg.token_ids) if msg.tokenizer == policy.tokenizer_id else encode_completion(policy.tokenizer, msg.text)
            received.rollouts.append(Rollout(
                prompt_id=msg.prompt_id, prompt_ids=policy.prompt_ids(self.task, problem), completion_ids=ids,
                text=msg.text, sender=msg.node, seed=msg.seed, label=self.labels.get(msg.key, "honest"), key=msg.key))
        return received

    def reward(self, rollouts: Sequence[Rollout]) -> list[Rollout]:
        """Set every rollout's verifiable reward (the task's rewards of their texts, in one call so a
        task that runs programs can run them several at a time); returns them."""
        rollouts = list(rollouts)
        rewards = self.task.rewards([r.text for r in rollouts], [self.problems[r.prompt_id] for r in rollouts])
        for r, reward in zip(rollouts, rewards):
            r.reward = reward
        return rollouts
