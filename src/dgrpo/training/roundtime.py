"""A rank's worst-case round compute, timed on its own hardware at start-up (``swarm.protocol.round_s: auto``, issue
31 (a), task h31p): what it proposes as its round_s (:mod:`dgrpo.transports.clockauto` agrees on one).

What a round's compute window (``B_{n-1}`` to ``P_n``) holds at a node, at its worst (an attacker's completions at the
length cap lengthen every honest node's update; its own completions can run to the cap too):

* generation: its ``B·G/m`` completions, sampled as one stream, each to ``sampling.max_new_tokens``;
* the update: the round's ``B`` groups of ``G`` completions at the cap, ``grpo.num_iterations`` times (one forward
  and backward per group; the reference model's forward too when ``grpo.beta > 0``);
* a ``replay`` defense with ``method: regenerate``: every received completion sampled again (``B·G``);
* the evaluation (``eval.n_prompts`` validation prompts, sampled and, with ``eval.greedy``, greedy, at the cap),
  which the main runs inside the compute window of every ``eval.every``-th round before its generation
  (:func:`dgrpo.training.loop.train`). Every rank counts it (any honest rank becomes the main when the main
  leaves), so the agreed round holds an evaluation round; the cost is that the other rounds wait for it too.

How (:func:`measure`, the real code on the real weights): the sampler (:func:`dgrpo.policy.sampling.sample`) run at
the node's generation batch and at the evaluation's, for :data:`STEPS` tokens each with no end-of-sequence token
(every row runs to the step count), gives a fixed part (prefill) and a per-token cost, extrapolated linearly to
``max_new_tokens``; the learner's backward (:meth:`Learner._backward <dgrpo.grpo.learner.Learner._backward>`) of one
group of ``G`` random completions at the cap (a heterogeneous swarm's: × ``foreign_length_factor``) on the longest
training prompt, its gradient then dropped (no optimizer step: the weights and the optimizer state are unchanged),
gives one group's update. A task whose reward runs programs (``python_math``): the attacker's completions (one
node's share, ``f = 1``) can each hold a program that runs to the sandbox's limit ``task.timeout_s``, run
:func:`~dgrpo.rewards.sandbox.default_jobs` at a time at every node that rewards them (review r31p: uncounted; 4 ranks, ``while True: pass`` at
``task.timeout_s=15``: agreed 12.1 s, the honest nodes skipped 2, 1 and 2 of 3 rounds; now 29.7 s, no skip).
:func:`extrapolate` is the pure
arithmetic. Not counted: the other rewards (the honest programs' run time, the evaluation's), decoding and
verifying messages, the attention cost that grows with the cache past :data:`STEPS` tokens; the safety factor
:data:`SAFETY` covers them on the measured runs (docs/distributed.md, ``round_s: auto``). A judge or TOPLOC defense
(model work on every received completion) is not timed either: ``auto`` with one is refused at config time
(:func:`dgrpo.swarm.clockconfig.check_untimed`, review r31p), and so is a reward function of the user's
(review r31d F6).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dgrpo.rewards.sandbox import default_jobs

if TYPE_CHECKING:
    from dgrpo.config import RunConfig
    from dgrpo.grpo.learner import Learner
    from dgrpo.policy.policy import Policy
    from dgrpo.tasks.base import Task

log = logging.getLogger("dgrpo.training")

STEPS = (4, 12)  # decode steps timed: two lengths give the fixed (prefill) part and the per-token cost
SAFETY = 1.5  # × the extrapolated compute: load spikes, the uncounted parts (module docstring)


@dataclass(frozen=True)
class Shape:
    """What one round asks of a node at its worst (module docstring).

    Attributes:
        completions: completions it samples a round (``B·G/m``), as one stream.
        groups: groups its update runs on (``B``), of ``group_size`` (``G``) completions each.
        max_new_tokens: the length cap, tokens.
        update_tokens: the longest completion the update scores, tokens: ``max_new_tokens``, or ×
            ``swarm.protocol.foreign_length_factor`` in a heterogeneous swarm (another tokenizer's completion is
            re-encoded and may be that much longer; ``swarm.models``); 0: ``max_new_tokens``.
        iterations: ``grpo.num_iterations``.
        regenerated: completions a regenerating replay defense samples again a round (``B·G`` each; 0: none).
        eval_rows: rows an evaluation decodes at once (``min(eval.n_prompts, validation prompts)``; 0: no round
            evaluated, neither round 0 with ``eval.first`` nor a multiple of ``eval.every`` below ``rounds``: the
            last evaluation comes after the last round, off the clock).
        eval_passes: an evaluation's requests ÷ ``eval_rows`` (2 with ``eval.greedy``, else 1; one more when the
            attack's success is measured on other validation prompts: :func:`eval_targets`).
        programs: received programs that may each run to ``program_s`` (the attacker's share, ``completions``, when
            the task's reward runs programs; 0: none).
        program_s: seconds, the sandbox's limit of one program run (``task.timeout_s``).
        jobs: programs run at once (:func:`~dgrpo.rewards.sandbox.default_jobs` of this process).
    """

    completions: int
    groups: int
    group_size: int
    max_new_tokens: int
    update_tokens: int = 0
    iterations: int = 1
    regenerated: int = 0
    eval_rows: int = 0
    eval_passes: int = 1
    programs: int = 0
    program_s: float = 0.0
    jobs: int = 1

    @classmethod
    def of(cls, cfg: "RunConfig", n_val: int, eval_targets: int = 0) -> "Shape":
        """The shape of ``cfg``'s rounds at one of its ``swarm.nodes`` ranks (``n_val``: validation prompts;
        ``eval_targets``: the attack's other evaluation prompts, :func:`eval_targets`)."""
        s = cfg.swarm
        regen = sum(s.prompts_per_round * s.group_size for d in cfg.defenses
                    if d.kind == "replay" and d.method == "regenerate")
        share = max(1, s.prompts_per_round * s.group_size // s.nodes)
        programs = share if cfg.task.kind == "python_math" else 0  # (the one task whose reward runs programs)
        return cls(share, s.prompts_per_round, s.group_size,
                   cfg.sampling.max_new_tokens, math.ceil(cfg.sampling.max_new_tokens * (
                       s.protocol.foreign_length_factor if s.models is not None else 1)), cfg.grpo.num_iterations, regen,
                   min(cfg.eval.n_prompts, n_val) if cfg.eval.first or cfg.eval.every < cfg.rounds else 0,
                   (2 if cfg.eval.greedy else 1) + (1 if eval_targets else 0), programs,
                   float(cfg.task.timeout_s) if programs else 0.0, default_jobs() if programs else 1)


@dataclass(frozen=True)
class Timings:
    """Measured seconds: ``gen`` sampling ``Shape.completions`` rows for :data:`STEPS` tokens (one time per step
    count), ``eval`` the same at ``Shape.eval_rows`` rows ((0, 0) without an evaluation), ``group_s`` one group's
    forward and backward at the cap (with the reference model's forward when ``grpo.beta > 0``)."""

    gen: tuple[float, float]
    eval: tuple[float, float]
    group_s: float


@dataclass(frozen=True)
class Estimate:
    """Seconds of each part of a worst-case round (before :data:`SAFETY`) and ``compute`` = SAFETY × the sum of the
    timed parts + ``programs`` (the attacker's programs at the sandbox limit: a bound already, not scaled)."""

    generate: float
    update: float
    regenerate: float
    evaluate: float
    compute: float
    programs: float = 0.0


def _line(pair: tuple[float, float], tokens: int, steps: tuple[int, int]) -> float:
    """Seconds to sample ``tokens`` tokens, by the line through (steps[0], pair[0]) and (steps[1], pair[1]) (a
    per-token cost of at least 0, a fixed part of at least 0)."""
    per = max(0.0, (pair[1] - pair[0]) / (steps[1] - steps[0]))
    return max(0.0, pair[0] - steps[0] * per) + tokens * per


def extrapolate(shape: Shape, t: Timings, steps: tuple[int, int] = STEPS, safety: float = SAFETY) -> Estimate:
    """The worst-case round of ``shape`` from the timings ``t`` (module docstring; pure arithmetic):
    generate = fixed + max_new_tokens × per-token (the line through the two timed step counts), update = groups ×
    iterations × group_s, regenerate = generate × regenerated ÷ completions (as many rows again, linear: larger
    batches are cheaper per row, so this errs long), evaluate = eval_passes × (fixed + max_new_tokens × per-token)
    at the evaluation's rows, programs = ⌈programs ÷ jobs⌉ × program_s; compute = safety × the sum of the others +
    programs."""
    gen = _line(t.gen, shape.max_new_tokens, steps)
    update = shape.groups * shape.iterations * t.group_s
    regen = gen * shape.regenerated / shape.completions
    evaluate = shape.eval_passes * _line(t.eval, shape.max_new_tokens, steps) if shape.eval_rows else 0.0
    programs = math.ceil(shape.programs / max(1, shape.jobs)) * shape.program_s
    return Estimate(gen, update, regen, evaluate, safety * (gen + update + regen + evaluate) + programs, programs)


def measure(policy: "Policy", learner: "Learner | None", task: "Task", shape: Shape, steps: tuple[int, int] = STEPS) -> Timings:
    """Time the sampler and one group's update on ``policy``'s weights (module docstring; a first untimed call warms
    the kernels). The weights, the optimizer state and the global random state are unchanged. ``learner`` None:
    no update timed (``group_s`` 0).

    Returns:
        the :class:`Timings` of ``shape``.
    """
    import torch

    from dgrpo.policy.sampling import sample
    from dgrpo.types import Rollout

    problems = sorted(task.train[:64], key=lambda p: -len(policy.prompt_ids(task, p)))
    prompts = [policy.prompt_ids(task, p) for p in problems]
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0

    def timed_sample(rows: int, tokens: int) -> float:
        ids = [prompts[i % len(prompts)] for i in range(rows)]
        start = time.perf_counter()
        sample(policy.model, ids, list(range(rows)), replace(policy.sampling, max_new_tokens=tokens), -1, pad)
        return time.perf_counter() - start  # (end-of-sequence -1: no row stops before `tokens`)

    timed_sample(min(shape.completions, 2), 2)  # (warm-up)
    gen = (timed_sample(shape.completions, steps[0]), timed_sample(shape.completions, steps[1]))
    evals = ((timed_sample(shape.eval_rows, steps[0]), timed_sample(shape.eval_rows, steps[1])) if shape.eval_rows
             else (0.0, 0.0))
    if learner is None:  # (a rank that trains nothing: an attacker alone in its process without a mirror)
        return Timings(gen, evals, 0.0)
    vocab = policy.model.get_input_embeddings().weight.shape[0]
    gen_ids = torch.Generator().manual_seed(0)
    eos = policy.tokenizer.eos_token_id
    rollouts = []
    for i in range(shape.group_size):
        ids = torch.randint(0, vocab, (shape.update_tokens or shape.max_new_tokens,), generator=gen_ids)
        if eos is not None:
            ids[ids == eos] = (eos + 1) % vocab
        rollouts.append(Rollout(problems[0].prompt_id, prompts[0], ids.tolist(), "", 0, reward=float(i % 2)))
    adv = torch.tensor([1.0 if i % 2 else -1.0 for i in range(shape.group_size)])
    was = policy.model.training

    def one_group() -> float:
        group = learner.score(rollouts).groups[0]
        policy.model.train()
        start = time.perf_counter()
        try:
            learner._backward(group, list(range(shape.group_size)), adv)
        finally:
            learner.optimizer.zero_grad(set_to_none=True)
            group.release()
            policy.model.train(was)
        return time.perf_counter() - start

    one_group()  # (warm-up)
    return Timings(gen, evals, one_group())


def eval_targets(cfg: "RunConfig", task: "Task", attacks=None) -> int:
    """Prompts an evaluation samples beyond its ``eval.n_prompts`` validation prompts: the attack's own (an
    ``equation`` attack's 2+2 questions), when they are other prompts (:func:`dgrpo.training.evaluate.eval_stream`
    samples them as one more batch; review r31p: uncounted, an evaluation without ``eval.greedy`` took twice its
    estimate). ``attacks``: the attacks this process hosts (the evaluation measures theirs, else the config's)."""
    from dgrpo.training.evaluate import eval_attack

    attack = eval_attack(cfg, attacks or {})
    if attack is None:
        return 0
    targets = attack.eval_problems(task.val)[: cfg.eval.n_prompts]
    return len(targets) if targets and targets != list(task.val[: cfg.eval.n_prompts]) else 0


def propose(cfg: "RunConfig", policy: "Policy", learner: "Learner | None", task: "Task", windows_s: float,
            attacks=None) -> float:
    """This rank's round_s proposal, seconds: its worst-case compute (:func:`measure`, :func:`extrapolate`) +
    ``windows_s`` (direct_s + relay_s), logged with its parts (``attacks``: :func:`eval_targets`)."""
    start = time.perf_counter()
    shape = Shape.of(cfg, len(task.val), eval_targets(cfg, task, attacks))
    est = extrapolate(shape, measure(policy, learner, task, shape))
    out = math.ceil((est.compute + windows_s) * 1000) / 1000
    log.info("swarm.protocol.round_s=auto: calibrated in %.1fs: generate %.2fs, update %.2fs, regenerate %.2fs, "
             "evaluate %.2fs (%d completions of %d tokens, %d groups of %d), x%g, + programs %gs = %.2fs compute + "
             "%gs windows: proposes round_s=%.3fs", time.perf_counter() - start, est.generate, est.update,
             est.regenerate, est.evaluate, shape.completions, shape.max_new_tokens, shape.groups, shape.group_size,
             SAFETY, est.programs, est.compute, windows_s, out)
    return out
