"""The attack protocol: what a malicious node sends instead of honest completions (paper §2-3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from dgrpo.policy.policy import Policy
from dgrpo.swarm.schedule import Slot
from dgrpo.tasks.base import Problem, Task


@dataclass(frozen=True)
class Poison:
    """One completion a malicious node sends, with its ground-truth label.

    ``label`` is ``"poisoned"`` (carries the attack's payload) or ``"malicious"`` (filler the
    attacker sends to shape the group's advantages, e.g. deliberately wrong answers).
    """

    text: str
    label: str = "poisoned"


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
    """

    task: Task
    round_idx: int
    node: int
    group_size: int
    mode: str = "horizontal"
    run_seed: int = 0
    policy: Policy | None = None


class Attack(Protocol):
    """A malicious node's behaviour."""

    name: str

    def choose_prompts(self, pool: Sequence[Problem], count: int, run_seed: int, round_idx: int, node: int) -> list[Problem]:
        """Vertical mode: the prompts this node picks (in-context attacks pick their targets)."""

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        """The completions sent for each slot (``slot.count`` of them)."""

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        """Validation problems on which attack success is measured."""

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict[str, float | None]:
        """Attack success metrics (``asr`` …) of honest completions of ``problems``."""


ATTACKS: dict[str, Callable[..., Attack]] = {}


def register(name: str):
    """Decorator adding an attack builder to :data:`ATTACKS` under the config ``kind``."""

    def deco(builder):
        ATTACKS[name] = builder
        return builder

    return deco
