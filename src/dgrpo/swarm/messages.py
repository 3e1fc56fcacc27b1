"""What travels between nodes: completions as text plus token ids (paper §2: only strings move)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Message:
    """One completion sent by a node in a round.

    Attributes:
        node: sender id.
        round: round index (0-based).
        prompt_id: which prompt this completes (group key).
        index: index of this completion among the sender's completions of the prompt.
        text: completion text (after the task's prefill).
        token_ids: the sender's token ids of the completion (eos included when generated).
        seed: sampling seed the sender claims it used (None when it does not claim one).
        tokenizer: the sender's tokenizer id; receivers with another tokenizer re-encode the text.
    """

    node: int
    round: int
    prompt_id: str
    index: int
    text: str
    token_ids: tuple[int, ...]
    seed: int | None
    tokenizer: str

    def to_dict(self) -> dict:
        """JSON-ready dict (token ids as a list)."""
        d = asdict(self)
        d["token_ids"] = list(self.token_ids)
        return d

    @property
    def key(self) -> tuple[int, int, str, int]:
        """(node, round, prompt_id, index): unique per message in an honest swarm."""
        return (self.node, self.round, self.prompt_id, self.index)
