"""Checkpoints: weights (safetensors), optimizer state and the round to resume from."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def save_checkpoint(run, next_round: int) -> Path:
    """Save every trained policy this process hosts under ``run_dir/checkpoint``.

    Layout: ``checkpoint/node{k}/`` (model + tokenizer via ``save_pretrained``, ``optimizer.pt``)
    for the lowest node id k holding each policy, and ``checkpoint/state.json`` with the next round.
    Writes to a temporary folder first so a crash never leaves a half-written checkpoint.
    """
    root = Path(run.run_dir) / "checkpoint"
    for owner, policy in run.swarm.honest_policies.items():
        target = root / f"node{owner}"
        tmp = root / f".node{owner}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        policy.model.save_pretrained(tmp)
        policy.tokenizer.save_pretrained(tmp)
        if policy.learner is not None:
            torch.save(policy.learner.optimizer.state_dict(), tmp / "optimizer.pt")
        if target.exists():
            import shutil

            shutil.rmtree(target)
        tmp.rename(target)
    (root / "state.json").write_text(json.dumps({"next_round": next_round}))
    return root
