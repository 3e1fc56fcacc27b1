"""The data types every layer shares: problem, slot, message, poison, rollout, verdict.

They are plain dataclasses with no behaviour beyond small derived properties, and this module
imports nothing from dgrpo at run time, so any layer can use them without importing another.
Their path through one round:

    Problem   a prompt of the task with its oracle answer          (tasks)
    Slot      "node k writes n completions of this problem"        (swarm.schedule, Alg. 1/2 L5)
    Message   one completion as it travels between nodes            (swarm, transports)
    Poison    one completion a malicious node sends, with its label (attacks)
    Rollout   a received completion as an honest node's update sees it (swarm → defenses → grpo)
    Verdict   a defense's decision on one rollout                  (defenses)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dgrpo.policy.policy import Policy
    from dgrpo.tasks.base import Task


@dataclass(frozen=True)
class Problem:
    """One prompt of a task.

    Attributes:
        prompt_id: stable id, unique within the task (groups are formed by it).
        question: the user message.
        answer: the oracle answer, as text (``"-3"``, ``"1234"``).
        solution: a worked solution in plain text (no ``<<…>>`` calculator marks, no ``####``).
        tags: facts attacks may select on, e.g. ``"two_two"`` when the solution computes 2+2 or
            2×2 as an intermediate step.
    """

    prompt_id: str
    question: str
    answer: str
    solution: str
    tags: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Slot:
    """A node must write ``count`` completions of ``problem``, with indices ``first .. first+count-1``."""

    problem: Problem
    count: int
    first: int = 0


@dataclass(frozen=True)
class Message:
    """One completion sent by a node in a round (paper §2: only strings move).

    Attributes:
        node: sender id.
        round: round index (0-based).
        prompt_id: which prompt this completes (group key).
        index: index of this completion among the sender's completions of the prompt.
        text: completion text (after the task's prefill).
        token_ids: the sender's token ids of the completion (eos included when generated).
        seed: sampling seed the sender claims it used (None when it does not claim one).
        tokenizer: the sender's tokenizer id; receivers with another tokenizer re-encode the text.
        context: the run context the sender signed for (run id and config fingerprint,
            :func:`dgrpo.swarm.identity.run_context`); "" when unsigned.
        signature: the sender's Ed25519 signature (hex) over every other field and the context
            (:func:`dgrpo.swarm.identity.signed_bytes`); None when unsigned.
        proof: the sender's TOPLOC proof of the hidden states that produced the completion (base64 chunks
            joined by ``,``, :mod:`dgrpo.policy.proofs`); "" when it sends none. Signed (its digest) when set.
    """

    node: int
    round: int
    prompt_id: str
    index: int
    text: str
    token_ids: tuple[int, ...]
    seed: int | None
    tokenizer: str
    context: str = ""
    signature: str | None = None
    proof: str = ""

    def to_dict(self) -> dict:
        """JSON-ready dict (token ids as a list; no ``proof`` key when it carries none)."""
        d = asdict(self)
        d["token_ids"] = list(self.token_ids)
        if not d["proof"]:
            del d["proof"]
        return d

    @property
    def key(self) -> tuple[int, int, str, int]:
        """(node, round, prompt_id, index): unique per message in an honest swarm."""
        return (self.node, self.round, self.prompt_id, self.index)


@dataclass(frozen=True)
class Poison:
    """One completion a malicious node sends, with its ground-truth label.

    ``label`` is ``"poisoned"`` (carries the attack's payload) or ``"malicious"`` (filler the
    attacker sends to shape the group's advantages, e.g. deliberately wrong answers).
    ``token_ids`` and ``seed``: what its message claims, when the attacker chooses (an adaptive one
    sends the ids it sampled, not a re-encoding of the text, and the seed it ground for); None keeps
    the swarm's choice (the text's encoding; the seed the protocol assigns to the slot).
    """

    text: str
    label: str = "poisoned"
    token_ids: tuple[int, ...] | None = None
    seed: int | None = None


@dataclass(frozen=True)
class AttackContext:
    """What an attacker knows when it writes (paper §2: the reward function and oracle answers;
    optionally the policy weights).

    Attributes:
        task: the task, hence its reward and every oracle answer.
        round_idx / node: where it is.
        group_size: G.
        mode: ``horizontal`` or ``vertical``.
        run_seed: the run seed (an attacker can derive the seeds honest nodes would claim).
        policy: the weights the attacker holds (the shared ones in a homogeneous swarm).
        length_limit: the protocol's length rule, in completion tokens (``sampling.max_new_tokens``
            when ``swarm.protocol.enforce_length`` is on, else None): receivers refuse longer ones.
    """

    task: Task
    round_idx: int
    node: int
    group_size: int
    mode: str = "horizontal"
    run_seed: int = 0
    policy: Policy | None = None
    length_limit: int | None = None


@dataclass(frozen=True)
class Verdict:
    """A defense's decision on one rollout.

    Attributes:
        accepted: False rejects the completion.
        defense: name of the defense that decided.
        reason: human-readable reason (``"token 'thief' outside top-10"``).
        position: first offending completion token position, when the defense has one.
        action: ``drop`` (leave the group) or ``zero`` (stay with reward 0); None = the swarm's
            ``reject_mode``.
    """

    accepted: bool
    defense: str
    reason: str = ""
    position: int | None = None
    action: str | None = None


ACCEPT = Verdict(True, "")


@dataclass
class Rollout:
    """One received completion, ready for rewarding, the defenses and the update.

    Attributes:
        prompt_id: group key.
        prompt_ids: the receiving node's prompt token ids for this prompt.
        completion_ids: ids scored by the update (the ids that travelled with the message when the
            receiver shares the sender's tokenizer, else the re-encoded text).
        text: completion text (after the task's prefill).
        sender: node id of the author.
        seed: sampling seed the author claims.
        reward: verifiable reward (set by the node before the update).
        verdicts: rejections so far (empty = accepted).
        label: simulation ground truth — ``honest``, ``poisoned`` or ``malicious`` (attacker
            filler). Used only for metrics; defenses never read it.
        key: the message key (node, round, prompt id, index) it came from.
        proof: the message's TOPLOC proof ("" when none; the ``toploc`` defense checks it).
    """

    prompt_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    sender: int
    seed: int | None = None
    reward: float = 0.0
    verdicts: list[Verdict] = field(default_factory=list)
    label: str = "honest"
    key: tuple = ()
    proof: str = ""

    @property
    def accepted(self) -> bool:
        return not self.verdicts
