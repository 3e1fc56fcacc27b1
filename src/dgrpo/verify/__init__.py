"""Framework-neutral checks of completions that any trainer can call, each returning one
:class:`~dgrpo.types.Verdict` (accepted, reason, position) per completion:

* :func:`topk_verdicts` (top-k support), :func:`replay_verdicts` (exact seeded replay),
  :func:`step_verdicts` (step checker), :func:`judge_verdicts` (LLM judge): the inputs are prompt ids,
  completion ids, the agreed :class:`SamplingParams`, the claimed seeds and a model or precomputed logits;
* :class:`Verifier` with :class:`TopK`, :class:`Replay`, :class:`Steps`, :class:`Judge`: the checks in
  order on one batch, the logit-level ones sharing one forward pass (:func:`completion_logits`);
* :func:`check_generation` / :func:`generation_problems`: the generator settings (``top_k=0``,
  ``repetition_penalty``, bf16, ``generate``'s own random stream under Replay, ...) that would make
  those checks reject honest work, each named in one line.

``dgrpo.defenses`` plugs them into the swarm; ``dgrpo.integrations.trl`` into TRL's GRPOTrainer
(docs/verification.md, docs/trl.md). Importing this package loads no torch.
"""

from dgrpo.types import ACCEPT, Verdict
from dgrpo.verify.checks import (Judge, Replay, Steps, TopK, Verifier, completion_logits, judge_verdicts,
                                 replay_verdicts, step_verdicts, topk_verdicts)
from dgrpo.verify.generation import check_generation, generation_problems

__all__ = ["ACCEPT", "Verdict", "Verifier", "TopK", "Replay", "Steps", "Judge", "completion_logits",
           "topk_verdicts", "replay_verdicts", "step_verdicts", "judge_verdicts", "SamplingParams",
           "check_generation", "generation_problems"]


def __getattr__(name: str):
    if name == "SamplingParams":  # torch: loaded on first use
        from dgrpo.policy.sampling import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'dgrpo.verify' has no attribute {name!r}")
