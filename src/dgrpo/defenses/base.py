"""The defense protocol, the base of defense configs, and :func:`defend`: the one place an honest
node's defenses run, before its update."""

from __future__ import annotations

import dataclasses
import time
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Iterable, Iterator, Literal, Mapping, Sequence

from pydantic import Field

from dgrpo.registry import KindConfig
from dgrpo.types import Rollout, Verdict

if TYPE_CHECKING:
    import torch

    from dgrpo.grpo.learner import Batch, Group


STAGES = ("rollouts", "logits")
"""The stages :func:`defend` runs a defense at; :func:`dgrpo.defenses.build_defense` refuses any other."""


class Defense:
    """A filter on incoming completions: the defense protocol every defense kind subclasses.

    ``stage = "rollouts"`` defenses judge the decoded rollouts of the whole batch (judge, reward
    outliers). ``stage = "logits"`` defenses judge one group at a time and also get the logits of
    the update's own forward pass (top-k support, replay), so they cost no extra forward pass.
    :func:`dgrpo.defenses.build_defense` refuses a class that does not subclass this one, or a
    ``stage`` not in :data:`STAGES`.

    Attributes:
        name: the kind's name in metrics and logs (``defense/<name>/…``).
        stage: one of :data:`STAGES`.
        counters: cumulative counts (str → int) the round record logs as ``defense/<name>/<key>``
            (the judge's unparseable and failed judgments), see :func:`defense_counters`; default empty.
        reads_hidden: a logits-stage defense that also reads the last-layer hidden states of the same
            forward (``toploc`` with ``shared_forward``): ``inspect`` then gets ``hidden=`` (per rollout
            (len, H) bf16) when the update's forward kept them; default False.
    """

    name: str = "defense"
    stage: Literal["rollouts", "logits"] = "rollouts"
    counters: Mapping[str, int] = MappingProxyType({})
    reads_hidden: bool = False

    def inspect(self, rollouts: Sequence[Rollout], logits: "torch.Tensor | None" = None) -> list[Verdict]:
        """One verdict per rollout. ``logits`` is the group's (G, T, V) float32 logits when stage is logits."""
        raise NotImplementedError(f"{type(self).__name__}.inspect")

    def verdict_store_key(self) -> str | None:
        """A key under which this defense shares its verdict cache (a ``cache`` dict attribute) and its
        ``counters`` with the defenses of the other honest nodes of its process (:func:`share_verdicts`).
        Equal keys must mean equal verdicts on equal input: a frozen, deterministic judge. None (the
        default): nothing shared."""
        return None


class DefenseConfig(KindConfig):
    """Config of a defense kind (``defenses: [{kind: …}]``, run by every honest node, in order).

    ``action`` says what a rejection does: ``drop`` the completion from its group (group statistics
    use what remains) or keep it with reward ``zero`` (the paper's r = r_verifiable × r_judge);
    None uses ``swarm.reject_mode``.
    """

    action: Literal["drop", "zero"] | None = Field(None, description="What a rejection does (None = swarm.reject_mode).")

    # What the kind needs from the run, declared here so that nothing else lists kinds (a run's device
    # set-up, ``dgrpo paper matrix``'s columns read these; a new kind keeps the defaults or sets its own):
    needs_exact_logits: ClassVar[bool] = False
    """It re-derives the sender's sampling decisions from logits: float32 and TF32 off on a GPU
    (:func:`dgrpo.training.build.run_device`, docs/gpu.md)."""
    needs_bound_seed: ClassVar[bool] = False
    """It takes the message's claimed sampling seed as given, so it is sound against an adaptive sender
    only with seed binding (``swarm.protocol.bind_seeds``); the matrix measures it with and without."""
    group_statistics: ClassVar[bool] = False
    """A completion's verdict depends on the other completions of its group (a z-score), so it is
    judged inside its whole group, not alone."""

    def cautions(self, run) -> list[str]:
        """Warnings, one line each, about a valid setting of ``run`` that leaves this defense unsound
        against an adaptive sender (:func:`dgrpo.defenses.build_defense` logs each once a process): a kind
        that ``needs_bound_seed`` in a run that does not bind seeds (review u36 C: accepted silently)."""
        if self.needs_bound_seed and not run.swarm.protocol.bind_seeds:
            return [f"the {self.kind} defense takes each message's claimed sampling seed as given and "
                    "swarm.protocol.bind_seeds=false: a sender that grinds seeds passes it (docs/verification.md); "
                    "set swarm.protocol.bind_seeds=true"]
        return []

    def sender_proof(self):
        """What every sender must attach to its messages for this defense to check, or None (nothing):
        ``toploc`` returns its :class:`dgrpo.policy.proofs.ProofParams`, and senders then prove each
        completion while sampling (the swarm's write, the matrix's senders)."""
        return None


class ExactDefenseConfig(DefenseConfig):
    """Config of a defense that recomputes the sender's sampling with its own weights (top-k, replay)."""

    needs_exact_logits: ClassVar[bool] = True

    def check(self, run) -> None:
        if run.swarm.models is not None:
            raise ValueError(f"the {self.kind} defense needs a homogeneous swarm (every node holds the same weights); use the judge for heterogeneous swarms")
        if run.model.dtype != "float32":
            raise ValueError(f"the {self.kind} defense is exact only with float32 weights and logits (docs/verification.md); set model.dtype=float32")


def share_verdicts(by_owner: Mapping[int, Sequence[Defense]]) -> None:
    """Give the defenses of one process's honest nodes that return the same :meth:`Defense.verdict_store_key`
    one verdict cache (the first one's): a completion that several in-process nodes receive is judged once
    per process, not once per node (a frozen deterministic judge gives each the same verdict). Each node's
    defense still returns its own verdicts and action. The ``counters`` are shared too: they count the
    judgments the process made, each once, and every node's (the round record reads the lowest one's) counts
    a verdict another node made first. Nodes of other processes (distributed ranks) judge for themselves.
    """
    stores: dict[str, tuple[dict, dict]] = {}
    for defenses in by_owner.values():
        for d in defenses:
            key = d.verdict_store_key()
            if key is not None:
                d.cache, d.counters = stores.setdefault(key, (d.cache, d.counters))


def defense_counters(defenses: Sequence[Defense]) -> dict[str, dict[str, int]]:
    """Defense name → a copy of its cumulative ``counters``, for the defenses that keep some."""
    return {d.name: dict(d.counters) for d in defenses if d.counters}


def saved_counters(defenses: Sequence[Defense]) -> list[dict[str, int]]:
    """A copy of each defense's cumulative ``counters``, in config order (empty for one that keeps none): what a
    node's checkpoint holds so that a resumed run's record goes on counting from the save, not from zero."""
    return [dict(d.counters) for d in defenses]


def restore_counters(defenses: Sequence[Defense], saved, where) -> None:
    """Set each defense's ``counters`` to what :func:`saved_counters` recorded at the save (``saved`` None: a
    checkpoint that holds none, the counters start at zero). Set, not added: judges that share their counters
    (:func:`share_verdicts`) are each set to the same saved values.

    Raises:
        CheckpointError: ``saved`` is not one object of counts (str → int ≥ 0) per defense of the config, or names a
            count the defense does not keep (names ``where``, the state file).
    """
    from dgrpo.errors import CheckpointError

    if saved is None:
        return
    ok = isinstance(saved, list) and len(saved) == len(defenses) and all(
        isinstance(s, dict) and set(s) == set(d.counters) and all(type(v) is int and v >= 0 for v in s.values())
        for d, s in zip(defenses, saved))
    if not ok:
        raise CheckpointError(f"{where}: defense_counters is not one object of counts per defense of the config "
                              f"({', '.join(d.name for d in defenses) or 'none'}); the state is damaged")
    for d, s in zip(defenses, saved):
        if s:
            d.counters.update(s)


def _judge(defense: Defense, rollouts: Sequence[Rollout], logits, times: dict[str, float], hidden=None) -> None:
    """Add ``defense``'s rejections to the rollouts no earlier defense rejected (rows of ``logits``, items
    of ``hidden`` for a defense that ``reads_hidden``)."""
    start = time.perf_counter()
    live = [i for i, r in enumerate(rollouts) if r.accepted]
    if live:
        rows, sub = [rollouts[i] for i in live], None if logits is None else logits[live]
        verdicts = (defense.inspect(rows, sub, hidden=[hidden[i] for i in live]) if defense.reads_hidden and hidden
                    else defense.inspect(rows, sub))
        for i, verdict in zip(live, verdicts):
            if not verdict.accepted:
                rollouts[i].verdicts.append(verdict)
    times[defense.name] += time.perf_counter() - start


def defend(defenses: Sequence[Defense], batch: "Batch", times: dict[str, float]) -> "Batch":
    """Run an honest node's defenses on a batch before its update, in config order per stage.

    Rollout-stage defenses judge every accepted rollout of the batch now. Logit-stage defenses judge
    each group on the logits of the update's own forward pass when the update reaches the group: the
    returned batch yields its groups one at a time, checked, to :meth:`dgrpo.grpo.learner.Learner.step`
    (so one group's graph is alive at a time). A defense sees only the rollouts no earlier defense
    rejected; a rejection appends its :class:`~dgrpo.types.Verdict` to the rollout.

    Args:
        times: defense name → seconds, accumulated (every defense gets a key).

    Returns:
        The batch with its groups checked on their logits as they are read.
    """
    for d in defenses:
        times.setdefault(d.name, 0.0)
    for d in (d for d in defenses if d.stage == "rollouts"):
        _judge(d, batch.rollouts, None, times)
    on_logits = [d for d in defenses if d.stage == "logits"]
    if not on_logits:
        return batch
    return dataclasses.replace(batch, groups=_checked(on_logits, batch.groups, times))


def _checked(defenses: list[Defense], groups: Iterable["Group"], times: dict[str, float]) -> Iterator["Group"]:
    wants_hidden = any(d.reads_hidden for d in defenses)
    for group in groups:
        if any(r.accepted for r in group.rollouts):
            if wants_hidden:  # the forward below keeps its hidden states (a group read before keeps none)
                group.keep_hidden = True
            logits = group.logits.detach()  # (G, T, V): the update's own forward pass, run here if not yet
            hidden = getattr(group, "hidden", None) if wants_hidden else None
            for d in defenses:
                _judge(d, group.rollouts, logits, times, hidden)
            del logits  # (only the group keeps its logits, for the loss)
        yield group
