"""``action="drop"`` in TRL: a rejected completion leaves the update as if the batch had never held it —
the same loss (policy term and KL term) and the same KL metric as the batch of the accepted completions
alone, and the accepted completions' advantages are their groups' statistics without it."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.verify import Replay, Verifier  # noqa: E402

from tests.integrations.test_trl import G, PARAMS, PROMPTS, Workers, config, length_reward  # noqa: E402


def _rows(batch: dict, keep: torch.Tensor) -> dict:
    """The batch restricted to rows ``keep``: what TRL would have built from those completions alone."""
    out = {k: v[keep] if torch.is_tensor(v) and v.dim() and v.shape[0] == len(keep) else v for k, v in batch.items()}
    out.pop("tool_mask", None)
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


def test_a_dropped_completion_leaves_the_loss_and_the_kl_as_if_never_there(tokenizer, tiny_model_dir, tmp_path):
    defense = RolloutDefense(Verifier([Replay(PARAMS)]), action="drop")
    workers = Workers(tokenizer, "seed")  # the last completion of each prompt: another seed than the one claimed
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=defend_rewards([length_reward], defense),
                          args=config(tmp_path, beta=0.1, loss_type="dapo", model_init_kwargs={"dtype": "float32"}),
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}), processing_class=tokenizer,
                          rollout_func=verified_rollout_func(workers, defense))
    torch.manual_seed(0)
    with torch.no_grad():  # move the policy away from the reference, so the KL term is not 0
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    trainer.model.eval()  # eval mode: no gradient-accumulation scaling of the loss
    batch = trainer._generate_and_score_completions([{"prompt": p} for p in [PROMPTS[0]] * G + [PROMPTS[1]] * G])
    accepted = torch.tensor([v.accepted for v in defense.verdicts])
    assert accepted.tolist() == [not p for p in workers.poisoned] == [True] * 3 + [False] + [True] * 3 + [False]
    assert torch.equal(batch["tool_mask"].bool().any(1), accepted)  # every token of a rejected completion masked

    # advantages of the kept completions: their group's mean and std without the dropped one (TRL's formula)
    texts = tokenizer.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(length_reward(None, texts)).view(2, G)[:, :3]
    expected = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).flatten()
    assert torch.allclose(batch["advantages"][accepted], expected, atol=1e-5)
    assert batch["advantages"][~accepted].abs().max() == 0

    kl = trainer._metrics["eval"]["kl"]
    dropped = trainer._compute_loss(trainer.model, batch)
    never = trainer._compute_loss(trainer.model, _rows(batch, accepted))
    assert torch.isclose(dropped, never, rtol=1e-5, atol=1e-7) and kl[-1] == pytest.approx(kl[-2], rel=1e-5)
    assert kl[-1] > 1e-4  # there is a KL term to leave out
    kept = {**batch, "num_items_in_batch": batch["completion_mask"].sum()}
    kept.pop("tool_mask")  # the rejected completions' tokens left in: their KL term and token count change the loss
    assert not torch.isclose(trainer._compute_loss(trainer.model, kept), never, rtol=1e-3)

    trainer.loss_type = "grpo"  # a per-sequence mean: the dropped completion counts as an empty row of the batch mean
    ratio = trainer._compute_loss(trainer.model, batch) / trainer._compute_loss(trainer.model, _rows(batch, accepted))
    assert ratio.item() == pytest.approx(6 / 8, rel=1e-5)
