"""The defense protocol: an honest node inspects incoming completions before they reach its update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal, Protocol, Sequence

if TYPE_CHECKING:
    import torch

    from dgrpo.swarm.rollout import Rollout


@dataclass(frozen=True)
class Verdict:
    """Decision on one completion.

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


class Defense(Protocol):
    """A filter on incoming completions.

    ``stage = "rollouts"`` defenses see the decoded rollouts before the update (judge, reward
    outliers). ``stage = "logits"`` defenses also get the logits of the update's own forward pass
    (top-k support, replay), so they cost no extra forward pass.
    """

    name: str
    stage: Literal["rollouts", "logits"]

    def inspect(self, rollouts: Sequence["Rollout"], logits: "torch.Tensor | None" = None) -> list[Verdict]:
        """One verdict per rollout. ``logits`` is (G, T, V) float32 for a group when stage is logits."""


DEFENSES: dict[str, Callable[..., Defense]] = {}


def register(name: str):
    """Decorator adding a defense builder to :data:`DEFENSES`."""

    def deco(builder):
        DEFENSES[name] = builder
        return builder

    return deco
