"""A completion as an honest node's update sees it."""

from __future__ import annotations

from dataclasses import dataclass, field

from dgrpo.defenses.base import Verdict


@dataclass
class Rollout:
    """One received completion, ready for rewarding and the update.

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

    @property
    def accepted(self) -> bool:
        return not self.verdicts
