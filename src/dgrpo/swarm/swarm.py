"""The nodes of a swarm and what they do each round: write, receive, defend, update.

Homogeneous swarms keep one :class:`Policy` for all honest nodes: they start from the same weights,
receive the same messages and compute the same update, so m honest nodes cost one model, and their
generation is one batch. Heterogeneous swarms give each node its own policy.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from dgrpo.attacks.base import Attack, AttackContext
from dgrpo.defenses.base import Defense, Verdict
from dgrpo.grpo.learner import UpdateStats
from dgrpo.policy.chat import encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import completion_seed
from dgrpo.swarm.messages import Message
from dgrpo.swarm.rollout import Rollout
from dgrpo.swarm.schedule import Slot
from dgrpo.swarm.validation import Limits, check_message
from dgrpo.tasks.base import Problem, Task

log = logging.getLogger(__name__)


@dataclass
class ReceiveReport:
    """What one honest policy did with a round's messages."""

    rollouts: list[Rollout]
    invalid: list[tuple[Message, str]] = field(default_factory=list)
    update: UpdateStats | None = None
    reward_seconds: float = 0.0
    defense_seconds: float = 0.0
    defense_times: dict = field(default_factory=dict)  # defense name → seconds this round


class Swarm:
    """Nodes hosted by this process plus the shared round mechanics.

    Args:
        task: the task every node trains on.
        policies: honest node id → policy (the same object for all honest nodes when homogeneous).
        attacks: malicious node id → attack.
        attacker_policies: malicious node id → policy the attacker holds (tokenizer, weights).
        defenses: honest policy (by ``id``) → defenses it runs, in order.
        run_seed: the run seed (sampling seeds derive from it).
        group_size: G.
        limits: message size limits.
    """

    def __init__(self, task: Task, policies: dict[int, Policy], attacks: dict[int, Attack],
                 attacker_policies: dict[int, Policy], defenses: dict[int, list[Defense]], run_seed: int,
                 group_size: int, limits: Limits, mode: str = "horizontal"):
        self.task, self.policies, self.attacks = task, policies, attacks
        self.attacker_policies, self.defenses = attacker_policies, defenses
        self.run_seed, self.group_size, self.limits, self.mode = run_seed, group_size, limits, mode
        self.problems: dict[str, Problem] = {p.prompt_id: p for p in [*task.train, *task.val]}
        self.labels: dict[tuple, str] = {}  # message key → honest / poisoned / malicious (simulation truth)

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
                if p.learner is not None and all(p is not q for q in self.policies.values())}

    def holders(self, policy: Policy) -> list[int]:
        """Honest node ids that hold ``policy``."""
        return [n for n, p in self.policies.items() if p is policy]

    # ------------------------------------------------------------------ write (Alg. 1 L5, Alg. 2 L5)
    def write(self, slots: dict[int, Sequence[Slot]], round_idx: int) -> dict[int, list[Message]]:
        """Every hosted node writes its completions for its slots.

        Honest nodes sharing a policy generate in one batch (per-sequence seeds make this identical
        to generating node by node). Malicious nodes ask their attack.
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

    # ------------------------------------------------------------------ receive + update (Alg. L9)
    def receive(self, policy: Policy, messages: Sequence[Message], round_idx: int) -> ReceiveReport:
        """Validate messages, turn them into rollouts for ``policy`` and reward them."""
        report = ReceiveReport(rollouts=[])
        limits = self.limits
        start = time.perf_counter()
        valid = []
        for msg in messages:
            reason = check_message(msg, sender=msg.node, round_idx=round_idx, prompt_ids=self.problems,
                                   tokenizer=policy.tokenizer, tokenizer_id=policy.tokenizer_id, limits=limits)
            if reason is not None:
                log.warning("rejected message from node %s (%s): %s", msg.node, msg.prompt_id, reason)
                report.invalid.append((msg, reason))
                continue
            valid.append(msg)
        problems = [self.problems[msg.prompt_id] for msg in valid]
        batch = getattr(self.task, "rewards", None)  # a task that runs programs scores them several at a time
        rewards = (batch([m.text for m in valid], problems) if batch is not None
                   else [self.task.reward(m.text, p) for m, p in zip(valid, problems)])
        for msg, problem, reward in zip(valid, problems, rewards):
            ids = list(msg.token_ids) if msg.tokenizer == policy.tokenizer_id else encode_completion(policy.tokenizer, msg.text)
            report.rollouts.append(Rollout(
                prompt_id=msg.prompt_id, prompt_ids=policy.prompt_ids(self.task, problem), completion_ids=ids,
                text=msg.text, sender=msg.node, seed=msg.seed, reward=reward,
                label=self.labels.get(msg.key, "honest"), key=msg.key))
        report.reward_seconds = time.perf_counter() - start
        return report

    def update(self, messages: Sequence[Message], round_idx: int) -> dict[int, ReceiveReport]:
        """Every honest policy receives the gathered messages, runs its defenses and updates.

        Returns:
            owner node id → report (one per distinct honest policy).
        """
        reports = {}
        for owner, policy in {**self.honest_policies, **self.mirror_policies}.items():
            report = self.receive(policy, messages, round_idx)
            defenses = self.defenses.get(owner, [])
            for defense in (d for d in defenses if d.stage == "rollouts"):
                start = time.perf_counter()
                live = [r for r in report.rollouts if r.accepted]
                for r, verdict in zip(live, defense.inspect(live) if live else []):
                    if not verdict.accepted:
                        r.verdicts.append(verdict)
                report.defense_times[defense.name] = time.perf_counter() - start
            logit_defenses = [d for d in defenses if d.stage == "logits"]
            report.update = policy.learner.step(report.rollouts, logit_defenses)
            report.defense_times.update(report.update.extra.get("defense_seconds", {}))
            report.defense_seconds = sum(report.defense_times.values())
            if owner in self.policies:  # a mirror's report is not the honest swarm's
                reports[owner] = report
        return reports


def rejection_counts(rollouts: Sequence[Rollout]) -> dict[str, Counter]:
    """Per defense: counts of rejected rollouts by label, plus totals by label under ``"_total"``."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in rollouts:
        counts["_total"][r.label] += 1
        for v in r.verdicts:
            counts[v.defense][r.label] += 1
    return counts


def first_verdict(r: Rollout) -> Verdict | None:
    """The verdict that rejected a rollout first, if any."""
    return r.verdicts[0] if r.verdicts else None
