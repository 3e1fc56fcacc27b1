"""Spot checks for the replay-type defenses (issue 36): the config fields both replay kinds share and the
per-group choice of what to check (:mod:`dgrpo.verify.spot` makes the choice; docs/verification.md gives
the coverage, the catch probability and the rounds until a cheater is banned)."""

from __future__ import annotations

from typing import Sequence

from pydantic import Field, model_validator

from dgrpo.defenses.base import ExactDefenseConfig


class SpotDefenseConfig(ExactDefenseConfig):
    """An exact defense whose receiver may check only a share of its peers' messages and positions.

    A message left unchecked is accepted; a checked message that fails is rejected (a ban strike, as any
    rejection). Which messages and positions are checked is drawn by the receiver from its own secret and
    the message's digest, so a sender cannot tell in advance which of its messages will be checked.
    """

    spot_fraction: float = Field(1.0, gt=0, le=1, description="Share of each peer's messages this node checks, each chosen with probability spot_fraction from the node's own secret and the message's digest (1 = every message). An unchecked message is accepted; a cheater poisoning a share p of n messages a round is caught in it with probability 1 − (1 − spot_fraction·p)^n (docs/verification.md, spot checks). In-process swarms only: below 1 refused with swarm.transport distributed or hivemind (catches are not shared between ranks yet).")
    position_fraction: float = Field(1.0, gt=0, le=1, description="Share of the token positions of a checked message that are checked, each with this probability (1 = every position). Below 1 a poisoned message with j departing tokens is caught with probability 1 − (1 − position_fraction)^j: a one-token edit only with position_fraction itself.")
    spot_seed: int | None = Field(None, description="Derive the spot-check secret from this seed (reproducible simulations and tests only: a seed in a config the peers can read tells a cheater which messages are checked; refused with swarm.transport distributed or hivemind). None = 32 random bytes from the OS, drawn when the defense is built.")

    def check(self, run) -> None:
        super().check(run)
        if self.spot_seed is not None and run.swarm.transport != "inprocess":  # (review u36 D)
            raise ValueError(f"defenses: {self.kind}'s spot_seed={self.spot_seed} makes which messages this node checks "
                             f"readable from its config, so a cheater can poison exactly the unchecked ones; with "
                             f"swarm.transport={run.swarm.transport} remove spot_seed (each node then draws its secret "
                             "from the OS)")
        if run.swarm.transport != "inprocess" and (self.spot_fraction < 1 or self.position_fraction < 1):  # (review u36f)
            raise ValueError(f"defenses: {self.kind} with spot_fraction={self.spot_fraction}, position_fraction="
                             f"{self.position_fraction} and swarm.transport={run.swarm.transport}: each rank checks its "
                             "own share, so a poison one honest rank catches and another leaves unchecked enters only "
                             "the other's update, their weights part and replay then rejects the other's honest work "
                             "(no caught message is shared between ranks yet, docs/verification.md); set spot_fraction=1 "
                             "and position_fraction=1")

    @model_validator(mode="after")
    def _spot_method(self):
        if self.position_fraction < 1 and getattr(self, "method", "fast") != "fast":
            raise ValueError(f"position_fraction={self.position_fraction} needs method: fast (regeneration recomputes every "
                             "position in order); set position_fraction=1 or method=fast")
        return self


class SpotSelection:
    """A defense's spot checker and its running counts (``counters``: checked and skipped messages,
    checked and total positions of the checked ones; in the round record as ``defense/<name>/<key>``)."""

    def __init__(self, cfg: SpotDefenseConfig):
        from dgrpo.verify.spot import SpotChecker

        self.checker = SpotChecker(cfg.spot_fraction, cfg.position_fraction, cfg.spot_seed)
        self.counters = {"spot_checked": 0, "spot_skipped": 0, "positions_checked": 0, "positions_total": 0}

    def choose(self, rollouts: Sequence) -> tuple[list[int], list[list[int] | None]]:
        """(indices of the rollouts to check, the positions to check in each of them: None = all)."""
        from dgrpo.verify.spot import rollout_digest

        if self.checker.full:
            return list(range(len(rollouts))), [None] * len(rollouts)
        chosen, positions = [], []
        for i, r in enumerate(rollouts):
            digest = rollout_digest(r.key, r.seed, r.completion_ids)
            if not self.checker.checks(digest):
                self.counters["spot_skipped"] += 1
                continue
            n = len(r.completion_ids)
            pos = self.checker.positions(digest, n)
            chosen.append(i)
            positions.append(pos)
            self.counters["spot_checked"] += 1
            self.counters["positions_checked"] += n if pos is None else len(pos)
            self.counters["positions_total"] += n
        return chosen, positions
