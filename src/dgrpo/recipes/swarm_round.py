"""The lines Algorithms 1 and 2 share, written once: the exchange, every honest policy's update, the
round's record and accounting, resuming.

The two swarm algorithms differ only in which prompts a node answers and how many completions it
writes of each (Alg. 1 L3-5, Alg. 2 L3-5). From the all-gather on they are the same lines of the
paper: the all-gather (Alg. 1 L6, L8 = Alg. 2 L7), then "every honest node updates its policy with GRPO
on the B groups" (Alg. 1 L9 = Alg. 2 L8)::

    exchange       the all-gather: every message of the round on every node, and who delivered each
    learn_all      every policy this process trains, each by learn:
    learn          one honest policy: route → validate → rewards → defenses → advantages → step
                   (a defense that needs the update's logits judges each group inside the step)
    close_round    the round's record (round_metrics: from the reports of the policies this process
                   reports), then the protocol's accounting (account: what each peer did, peers.jsonl,
                   the strikes and bans it costs, swarm/accounting.py, bans.json)
    resume_rounds  rebuild a checkpointed run, restore it and continue the recipe's rounds

``recipes/horizontal.py`` and ``recipes/vertical.py`` call them on their ``# L6, L8`` / ``# L7``,
``# L9`` / ``# L8`` and ``# metrics, strikes, bans`` lines; :class:`Clock` times the round's parts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from dgrpo.config import RunConfig
from dgrpo.defenses import defend, defense_counters
from dgrpo.training.build import Run, build_run
from dgrpo.training.loop import OneRound, train
from dgrpo.training.main_dir import main_dir
from dgrpo.swarm.accounting import account_round
from dgrpo.training.records import PolicyReport, log_peers, peers_of_round, round_record
from dgrpo.training.resume import restore
from dgrpo.types import Message

if TYPE_CHECKING:
    from dgrpo.policy.policy import Policy


@dataclass
class Clock:
    """``time.perf_counter()`` (seconds) at the start of the round's writing (made then), of its exchange and
    of its update (:func:`exchange` marks both): :func:`round_metrics`'s ``starts``."""

    starts: list[float] = field(default_factory=lambda: [time.perf_counter()])

    def mark(self) -> None:
        self.starts.append(time.perf_counter())


def exchange(run: Run, local: dict[int, list[Message]], clock: Clock) -> list[Message]:
    """Alg. 1 L6, L8 / Alg. 2 L7: the all-gather of every hosted node's messages (``local``: node → its
    messages) through the run's transport; records who delivered each (``Swarm.carriers``, accounting only)
    and marks the exchange's start and end on ``clock``. Returns every message of the round."""
    clock.mark()
    messages = run.transport.all_gather(local)
    run.swarm.carriers = dict(run.transport.carriers)
    clock.mark()
    return messages


def learn_all(run: Run, messages: Sequence[Message], r: int) -> dict[int, PolicyReport]:
    """Alg. 1 L9 / Alg. 2 L8 for every policy this process trains (``Swarm.trained``: the honest ones, then
    an attacker's mirror), each by :func:`learn`. Returns owner → its report."""
    return {owner: learn(run, owner, policy, messages, r) for owner, policy in run.swarm.trained.items()}


def close_round(run: Run, r: int, reports: dict[int, PolicyReport], clock: Clock) -> dict:
    """The round's record (:func:`round_metrics`), then its accounting (:func:`account`); returns the record."""
    record = round_metrics(run, r, reports, tuple(clock.starts))
    account(run, r, reports)
    return record


def learn(run: Run, owner: int, policy: Policy, messages: Sequence[Message], r: int) -> PolicyReport:
    """Alg. 1 L9 / Alg. 2 L8 for the policy of node ``owner`` (an honest node, or the attacker's mirror).

    Args:
        run: the run (its swarm holds the policy's learner and ``owner``'s defenses).
        owner: the node whose view of the round this policy learns from (what a protocol attacker
            routes to it, :meth:`dgrpo.swarm.swarm.Swarm.route`).
        policy: the policy trained (``run.swarm.trained[owner]``).
        messages: every message of round ``r`` after the all-gather.
        r: the round.

    Returns:
        The policy's report: received rollouts with rewards and verdicts, refused messages, the
        update's statistics, reward and defense seconds, each defense's counters.
    """
    swarm = run.swarm
    received = swarm.receive(policy, swarm.route(messages, owner, r), r)                       # route, validate
    start = time.perf_counter()
    swarm.reward(received.rollouts)                                                            # rewards
    report = PolicyReport(received.rollouts, received.invalid, reward_seconds=time.perf_counter() - start)
    learner = swarm.learners[policy]
    batch = defend(swarm.defenses[owner], learner.score(received.rollouts), report.defense_times)  # defenses:
    # stage "rollouts" (judge, reward outlier, step checker, replay regenerate) judge the batch here; stage
    # "logits" (top-k, fast and tolerant replay) need the update's logits: judged in learner.step, a group at a time
    report.update = learner.step(batch, r)                                                     # advantages, step
    report.defense_counts = defense_counters(swarm.defenses[owner])
    return report


def round_metrics(run: Run, r: int, reports: dict[int, PolicyReport], starts: tuple[float, float, float]) -> dict:
    """The record of round ``r`` ({} in a process reporting no honest node).

    Args:
        reports: owner → :func:`learn`'s report; a mirror's is left out (it is not the honest swarm's).
        starts: ``time.perf_counter()`` at the start of writing, of the exchange and of the update
            (seconds); the update ends now.
    """
    t0, t1, t2 = starts
    t3 = time.perf_counter()
    reports = _reported(run, reports)
    for owner, report in reports.items():  # read after every policy's learn: nodes that share a frozen judge's
        report.defense_counts = defense_counters(run.swarm.defenses[owner])  # counters count this round's in full
    times = {"generate": t1 - t0, "exchange": t2 - t1, "update": t3 - t2, "round": t3 - t0}
    return round_record(run, r, reports, times) if reports else {}


def account(run: Run, r: int, reports: dict[int, PolicyReport]) -> None:
    """The round's bookkeeping after its record: what each peer did (``peers.jsonl``, from the lowest
    reported honest policy's receive), the strikes and bans it costs (:mod:`dgrpo.swarm.accounting`,
    ``bans.json``: the next round's admission refuses a banned signer). Nothing in a process reporting
    no honest node, as :func:`round_metrics`."""
    reports = _reported(run, reports)
    if not reports:
        return
    rec = peers_of_round(run, r, reports[min(reports)])
    if run.swarm.protocol is not None:
        account_round(run.swarm.protocol.bans, rec, run.swarm.policies, r, main_dir(run))
    log_peers(run, rec)


def _reported(run: Run, reports: dict[int, PolicyReport]) -> dict[int, PolicyReport]:
    """The reports of the honest swarm's policies (a mirror's is left out: it is not the honest swarm's)."""
    return {owner: report for owner, report in reports.items() if owner in run.swarm.policies}


def resume_rounds(cfg: RunConfig, run_dir: Path, rewrite_config: bool, one_round: OneRound) -> Path:
    """Continue the checkpointed run in ``run_dir`` with the recipe's ``one_round`` (dgrpo.training.resume)."""
    run = build_run(cfg, run_dir)
    restore(run, rewrite_config)
    return train(run, one_round)
