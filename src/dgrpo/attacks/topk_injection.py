"""Top-k-constrained injection: "All hail to the thief" (or "Gleeb Glorp Glub" in every sentence)
written only with tokens inside the receivers' top-k (an adaptive attack on the top-k check, §4.1).

The attacker holds the honest weights (homogeneous swarm). Each poisoned completion is the payload
spelled with top-k tokens (:func:`dgrpo.attacks.constrained.steer`, over spellings, casing,
spacing and paraphrases) followed by the swarm's own seeded top-k sampling; of ``tries`` seeds it
keeps the first completion that carries the payload and earns full reward (else the best one). So it
passes the top-k check by construction; its reward is whatever the model's own reasoning earns, and
it fails exact replay wherever a payload token is not the seeded choice.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.base import Attack, ClaimedPoison, PoisoningConfig
from dgrpo.attacks.claimed import grind_seeds, write_claimed
from dgrpo.attacks.common import default_prompts
from dgrpo.metrics.asr import contains_target, every_sentence, normalise
from dgrpo.registry import register
from dgrpo.tasks.base import Task
from dgrpo.types import AttackContext, Poison, Problem, Slot

PARAPHRASES = {"All hail to the thief": ("Hail to the thief", "All hail the thief")}


class TopKInjectionConfig(PoisoningConfig):
    """``attack.kind=topk_injection``: injection spelled inside the receivers' top-k (adaptive, vs §4.1)."""

    kind: Literal["topk_injection"] = "topk_injection"
    text: str = Field("All hail to the thief", min_length=1, description="Payload.")
    placement: Literal["start", "every_sentence"] = Field("start", description="start: the payload opens the reasoning; every_sentence: it opens every sentence (§B.1).")
    paraphrases: list[str] | None = Field(None, description="Other wordings tried after the payload's spellings (None = built-in ones for the hail payload; paraphrases do not count for the exact ASR).")
    tries: int = Field(4, ge=1, description="Seeds tried per poisoned completion for one that carries the payload and earns full reward.")

    def success_metric(self) -> str | None:
        """``attack/asr_every_sentence`` for a payload that opens every sentence, else ``attack/asr``."""
        return "attack/asr_every_sentence" if self.placement == "every_sentence" else "attack/asr"


@register("attack", "topk_injection", config=TopKInjectionConfig)
class TopKInjectionAttack(Attack):
    """Constrained-decoding injection; ``stats`` counts payloads placed and full-reward completions."""

    name = "topk_injection"

    def __init__(self, cfg, run_cfg=None):
        self.cfg = cfg
        extra = PARAPHRASES.get(cfg.text, ()) if cfg.paraphrases is None else cfg.paraphrases
        self.variants = _variants(cfg.text, extra)
        self.stats = {"poisons": 0, "carried": 0, "full_reward": 0}

    def poison(self, ctx: AttackContext, problem: Problem, seed: int) -> ClaimedPoison:
        from dgrpo.policy.chat import decode_completion
        from dgrpo.attacks.constrained import constrained_completion

        policy, task = ctx.policy, ctx.task
        prompt = policy.prompt_ids(task, problem)
        best = None
        for s in grind_seeds(seed, self.cfg.tries):
            ids, placed = constrained_completion(policy, prompt, self.variants, s, self.cfg.placement == "every_sentence")
            text = decode_completion(policy.tokenizer, ids)
            score = (self.carries(text), task.reward(text, problem))
            if best is None or score > best[0]:
                best = (score, ids, text, s)
            if score == (True, 1.0):
                break
        (carried, reward), ids, text, s = best
        self.stats["poisons"] += 1
        self.stats["carried"] += carried
        self.stats["full_reward"] += reward >= 1.0
        return ClaimedPoison(text, "poisoned", tuple(ids), s)

    def carries(self, text: str) -> bool:
        """Whether ``text`` carries the payload as the ASR metric counts it."""
        if self.cfg.placement == "every_sentence":
            return bool(every_sentence([text], self.cfg.text))
        return normalise(self.cfg.text) in normalise(text)

    def choose_prompts(self, pool, count, run_seed, round_idx, node, ctx=None) -> list[Problem]:
        return default_prompts(pool, count, run_seed, round_idx, node)

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        return write_claimed(slots, ctx, self.cfg.poisoned_per_group, lambda p, i, seed: self.poison(ctx, p, seed))

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        return list(val)

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict:
        """``asr``: contains the payload; ``asr_every_sentence``: carries it in every sentence."""
        return {"asr": contains_target(completions, self.cfg.text),
                "asr_every_sentence": every_sentence(completions, self.cfg.text)}


def _variants(text: str, paraphrases: Sequence[str]) -> list[str]:
    from dgrpo.attacks.constrained import spellings

    return spellings(text, paraphrases)
