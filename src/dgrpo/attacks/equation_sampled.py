"""Faithful 2+2=5 (paper §3.4.1 as the paper's attacker does it, §4.1's 21.5% top-k detection):
minimal edits of the attacker's own samples.

The shipped :mod:`dgrpo.attacks.equation` rewrites the *oracle* solution, text the model would not
sample, so the top-k check rejects nearly all of it. This attacker samples completions from its own
copy of the weights with the swarm's seeded top-k sampling, keeps those that earn full reward and
state a 2+2 or 2×2 step equal to 4, and rewrites only that result token to ``wrong_result`` (later
steps keep the true value, so the reward stays 1). Of its candidates it prefers those that the
receivers' top-k check would still accept (one forward pass over the candidates). When no sample
qualifies it falls back to the oracle rewrite and counts it in ``stats["fallback"]``.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.base import ClaimedPoison
from dgrpo.attacks.claimed import grind_seeds, write_claimed
from dgrpo.attacks.equation import EquationAttack, EquationAttackConfig, manipulate
from dgrpo.registry import register
from dgrpo.tasks.equations import TWO_TWO
from dgrpo.types import AttackContext, Poison, Problem, Slot


def edit_result_tokens(tokenizer, ids: Sequence[int], wrong_result: str = "5") -> list[int] | None:
    """``ids`` with the result token of every 2+2 / 2×2 step that equals 4 replaced by ``wrong_result``.

    Works on tokens, not text, so the sampled tokenisation is kept everywhere else. A result is
    editable when it is exactly one token whose text is the digits (with optional leading space) and
    the same text with ``wrong_result`` is one token too.

    Returns:
        The edited ids (same length), or None when the text has no editable 2+2 / 2×2 = 4 step.
    """
    pieces = [tokenizer.decode([t]) for t in ids]
    starts, pos = [], 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    text = "".join(pieces)
    out, edited = list(ids), False
    for m in TWO_TWO.finditer(text):
        if m.group(1) != "4":
            continue
        a = m.start(1)
        i = max(j for j, s in enumerate(starts) if s <= a)
        piece = pieces[i]
        if piece.strip() != "4" or starts[i] + len(piece) != m.end(1):
            return None  # the result shares its token with other text: no single-token edit
        new = tokenizer(piece.replace("4", wrong_result), add_special_tokens=False)["input_ids"]
        if len(new) != 1:
            return None
        out[i], edited = new[0], True
    return out if edited else None


class FaithfulEquationConfig(EquationAttackConfig):
    """``attack.kind=equation_sampled``: 2+2=5 as minimal edits of sampled completions (vertical)."""

    kind: Literal["equation_sampled"] = "equation_sampled"
    candidates: int = Field(8, ge=1, description="Completions sampled per poisoned slot to find one with an editable 2+2 / 2×2 = 4 step and full reward.")
    prefer_topk: bool = Field(True, description="Among the qualifying candidates, send first those whose every token stays inside the receivers' top-k after the edit.")


@register("attack", "equation_sampled", config=FaithfulEquationConfig)
class FaithfulEquationAttack(EquationAttack):
    """Minimal-edit 2+2=5; ``stats``: poisons, fallback (oracle rewrite), inside_topk (by the attacker's own check)."""

    name = "equation_sampled"

    def __init__(self, cfg, run_cfg=None):
        super().__init__(cfg, run_cfg)
        self.stats = {"poisons": 0, "fallback": 0, "inside_topk": 0}

    def poison_sampled(self, ctx: AttackContext, problem: Problem, seed: int) -> ClaimedPoison:
        from dgrpo.policy.chat import decode_completion, encode_completion

        policy, task, tok = ctx.policy, ctx.task, ctx.policy.tokenizer
        seeds = grind_seeds(seed, self.cfg.candidates)
        found = []
        for s, (ids, text) in zip(seeds, policy.generate(task, [problem] * len(seeds), seeds)):
            edited = edit_result_tokens(tok, ids, self.cfg.wrong_result)
            if edited is None:
                continue
            new_text = decode_completion(tok, edited)
            if task.reward(new_text, problem) >= 1.0:
                found.append((edited, new_text, s))
        self.stats["poisons"] += 1
        if not found:
            self.stats["fallback"] += 1
            text = self.poison(task, problem)
            return ClaimedPoison(text, "poisoned", tuple(encode_completion(tok, text)), seed)
        inside = self._inside_topk(policy, task, problem, [f[0] for f in found]) if self.cfg.prefer_topk else [False] * len(found)
        order = sorted(range(len(found)), key=lambda j: not inside[j])  # stable: sampling order otherwise
        j = order[0]
        self.stats["inside_topk"] += inside[j]
        edited, text, s = found[j]
        return ClaimedPoison(text, "poisoned", tuple(edited), s)

    @staticmethod
    def _inside_topk(policy, task, problem, completions: list[list[int]]) -> list[bool]:
        from dgrpo.policy.scoring import group_logits
        from dgrpo.verify.topk import first_outside_topk
        import torch

        with torch.no_grad():
            logits = group_logits(policy.model, policy.prompt_ids(task, problem), completions, policy.tokenizer.pad_token_id)
        firsts = first_outside_topk(logits, completions, policy.tokenizer.eos_token_id, policy.sampling.top_k, 1e-3)
        return [f is None for f in firsts]

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        return write_claimed(slots, ctx, self.cfg.poisoned_per_group, lambda p, i, seed: self.poison_sampled(ctx, p, seed))


__all__ = ["FaithfulEquationAttack", "FaithfulEquationConfig", "edit_result_tokens", "manipulate"]
