"""The protocol's accounting: strikes and bans from a round's per-peer record (issue 31).

The metrics code only records what each peer did (:func:`dgrpo.training.records.peer_record`); what
that costs a peer is decided here, from the strike table of :mod:`dgrpo.swarm.protocol`, by the
recipe's round after its record (:func:`dgrpo.recipes.swarm_round.account` calls :func:`account_round`):

* a refusal whose rule is in :data:`~dgrpo.swarm.protocol.STRIKES` is a strike against the signer (only
  it could have signed that message for this run and round, breaking a rule it chose);
* :data:`~dgrpo.swarm.protocol.DROPPED` and :data:`~dgrpo.swarm.protocol.REFUSED` rules never strike
  (replays anyone can send; what an honest sampler can produce; absence of data anyone can delete);
* what a transport refused under a store key (``transport``) and what other ranks saw (``views``)
  never strike: any rank can write any key;
* a defense's rejection of an accepted rollout is a strike.

Every honest process applies this to the same accepted messages (the distributed cross-check gives
every honest rank the same set, :func:`dgrpo.swarm.protocol.compare_views`), so all ban alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from dgrpo.swarm.protocol import STRIKES, BanList


def peer_strikes(peer: dict) -> int:
    """Ban strikes of one sender's round record (``{"rejected": {rule: n}, "defense": {name: n}, ...}``):
    its refusals whose rule is a strike, plus the defense rejections of its accepted rollouts."""
    return sum(n for rule, n in peer["rejected"].items() if rule in STRIKES) + sum(peer["defense"].values())


def apply_bans(bans: BanList, peers: dict[str, dict], hosted: Iterable[int], round_idx: int) -> bool:
    """Add the round's strikes of every signer in ``peers`` (a :func:`peer_record`'s ``peers``) to ``bans``.

    Args:
        hosted: nodes of this process (never struck: a node never bans itself, nor, in-process, the
            honest nodes beside it).

    Returns:
        Whether the ban list changed (a strike or a ban), i.e. whether ``bans.json`` is to be written.
    """
    hosted, changed = set(hosted), False
    for who, p in peers.items():
        if who.isdigit() and int(who) not in hosted:
            strikes = peer_strikes(p)
            changed |= bans.strike(int(who), strikes, round_idx) or strikes > 0
    return changed


def account_round(bans: BanList, rec: dict, hosted: Iterable[int], round_idx: int, run_dir: Path | None) -> None:
    """Apply the round's strikes of ``rec`` (a :func:`peer_record` with its ``peers``) to ``bans``, note the
    bans in force under ``rec["banned"]`` (node → round of its ban, as str → int) and, where ``run_dir`` is
    given (the main process) and the list changed, write ``bans.json`` there."""
    changed = apply_bans(bans, rec["peers"], hosted, round_idx)
    rec["banned"] = {str(n): r for n, r in sorted(bans.banned.items())}
    if changed and run_dir is not None:
        bans.save(run_dir, round_idx)
