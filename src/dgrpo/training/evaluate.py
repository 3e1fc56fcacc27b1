"""Validation of the honest policies: accuracy, format, length and attack success on held-out prompts.

Completions use the swarm's sampling strategy (temperature from ``eval.temperature`` when set) with
seeds fixed across evaluations (:data:`EVAL_ROUND`), so changes between evaluations reflect the
weights; with ``eval.greedy`` the same prompts are also answered greedily (``eval/greedy/…``).
Every rate carries its Wilson 95% interval (:mod:`dgrpo.metrics.intervals`) over ``eval/n``
completions. The ensemble recipe votes over the same completions (:func:`eval_texts`).

What shows a collapse coming (``eval.drift``, docs/training.md): the first evaluation's sampled
completions are kept as a fixed reference (``eval_reference/`` in the run directory, with their
per-token log-probabilities under the weights that wrote them, taken from the logits that sampled
them: :func:`dgrpo.policy.sampling.sample`'s ``scores``); each later evaluation re-scores them
under the current weights, behind the prefill of the same prompts that its sampling computes
(:mod:`dgrpo.policy.rescore`), so the prompts run once for both:

    eval/kl_to_start = mean_t [log π_0(x_t | x_<t) − log π_θ(x_t | x_<t)]      (x ~ π_0, per token)
    eval/entropy     = mean_t H(π_θ(· | x_<t))                                (nats, full softmax)

The first is the Monte Carlo estimate of KL(π_0 ‖ π_θ) per token on π_0's own completions (sampled
with the swarm's top-k, so up to that truncation); it grows as the policy leaves where it started.
The second falls when the policy becomes deterministic (entropy collapse).
"""

from __future__ import annotations

import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import torch

from dgrpo.attacks import Attack, build_attack
from dgrpo.config import RunConfig
from dgrpo.policy.policy import Policy
from dgrpo.errors import CheckpointError
from dgrpo.metrics.intervals import with_interval
from dgrpo.policy.rescore import Rescore
from dgrpo.policy.sampling import SamplingParams, completion_seed
from dgrpo.policy.scoring import completion_stats
from dgrpo.rewards.format import format_reward
from dgrpo.tasks.base import Task, is_correct
from dgrpo.types import Problem

EVAL_ROUND = -1  # the round of every evaluation completion's sampling seed: fixed across evaluations
RATES = ("eval/accuracy", "eval/format_rate", "eval/greedy/accuracy", "eval/greedy/format_rate")  # with intervals
EVAL_MEANS = (*RATES, "eval/completion_tokens", "eval/greedy/completion_tokens", "eval/kl_to_start",
              "eval/entropy")  # averaged over the honest policies
REFERENCE_DIR = "eval_reference"


@contextmanager
def eval_sampling(policy: Policy, cfg: RunConfig, temperature: float | None = None) -> Iterator[Policy]:
    """Inside the block ``policy`` samples at ``temperature`` (default: ``eval.temperature`` when set;
    0 = greedy)."""
    sampling = policy.sampling
    temperature = cfg.eval.temperature if temperature is None else temperature
    if temperature is not None:
        policy.sampling = SamplingParams(sampling.top_k, temperature, sampling.max_new_tokens)
    try:
        yield policy
    finally:
        policy.sampling = sampling


def eval_completions(policy: Policy, task: Task, problems: Sequence[Problem], run_seed: int, owner: int) -> list[tuple[list[int], str]]:
    """One completion (ids, text) per problem, seeded by (run seed, :data:`EVAL_ROUND`, owner, prompt)."""
    seeds = [completion_seed(run_seed, EVAL_ROUND, owner, p.prompt_id, 0) for p in problems]
    return policy.generate(task, list(problems), seeds)


def eval_attack(cfg: RunConfig, hosted: dict[int, Attack]) -> Attack | None:
    """The attack whose success is measured: a hosted attacker's, else built from the config (a
    process hosting only honest nodes still measures ASR); None without an attack."""
    if hosted:
        return next(iter(hosted.values()))
    return build_attack(cfg.attack, cfg) if cfg.attack.kind != "none" else None


def eval_texts(policy: Policy, cfg: RunConfig, task: Task, problems: list[Problem], targets: list[Problem],
               owner: int) -> tuple[list[tuple[list[int], str]], list[str]]:
    """Completions of the validation ``problems`` and the texts of the attack's ``targets`` (the same
    completions when the targets are those problems), sampled as :func:`eval_sampling` says."""
    outs, target_texts, _ = eval_stream(policy, cfg, task, problems, targets, owner, greedy=False)
    return outs, target_texts


def eval_stream(policy: Policy, cfg: RunConfig, task: Task, problems: list[Problem], targets: list[Problem],
                owner: int, greedy: bool, scores: list | None = None, rescore: Rescore | None = None
                ) -> tuple[list[tuple[list[int], str]], list[str], list | None]:
    """Everything one evaluation asks of ``policy``, as one stream of requests: the validation
    ``problems`` sampled as :func:`eval_sampling` says, the attack's ``targets`` (when they are other
    problems) and, with ``greedy``, the same problems answered greedily. The greedy and sampled
    answers to a prompt share its prefill, and rows that finish are refilled with waiting requests
    (:func:`dgrpo.policy.sampling.sample`); at most as many rows decode at once as the largest of
    the separate calls this replaces, so the memory stays theirs. Each completion is the one its
    own call would give (seeded by (run seed, :data:`EVAL_ROUND`, owner, prompt)). With ``scores``
    (an empty list), each sampled completion of ``problems`` is scored as it is sampled: the list
    gets per such completion (log-probs, entropies), two (T,) float32 tensors in nats under
    ``policy``'s weights (what :func:`dgrpo.policy.scoring.completion_stats` gives, up to float32
    rounding), so the evaluation that writes the drift reference needs no second pass. ``rescore``:
    completions of these prompts (the drift reference) scored behind the stream's prefill.

    Returns:
        (sampled completions of ``problems``, texts for ``targets``, greedy completions or None).
    """
    temperature = policy.sampling.temperature if cfg.eval.temperature is None else cfg.eval.temperature
    batches = [problems]
    extra_targets = bool(targets) and targets != problems
    if extra_targets:
        batches.append(targets)
    if greedy:
        batches.append(problems)
    asked = [p for batch in batches for p in batch]
    temps = [0.0 if greedy and k == len(batches) - 1 else temperature for k, batch in enumerate(batches) for _ in batch]
    seeds = [completion_seed(cfg.seed, EVAL_ROUND, owner, p.prompt_id, 0) for p in asked]
    kept = None if scores is None else [[] for _ in problems] + [None] * (len(asked) - len(problems))
    outs = policy.generate(task, asked, seeds, temperatures=temps, max_rows=max(map(len, batches)), scores=kept,
                           rescore=rescore)
    if scores is not None:
        scores.extend((torch.tensor([lp for lp, _ in k], dtype=torch.float32),
                       torch.tensor([h for _, h in k], dtype=torch.float32)) for k in kept[: len(problems)])
    parts, start = [], 0
    for batch in batches:
        parts.append(outs[start : start + len(batch)])
        start += len(batch)
    sampled = parts[0]
    target_texts = [t for _, t in (parts[1] if extra_targets else sampled)] if targets else []
    return sampled, target_texts, parts[-1] if greedy else None


def rates(task: Task, problems: Sequence[Problem], outs: Sequence[tuple[list[int], str]], prefix: str = "eval/") -> dict:
    """Accuracy (full reward), think/answer format rate and mean length of one policy's completions."""
    texts = [t for _, t in outs]
    return {f"{prefix}accuracy": statistics.fmean(is_correct(task, t, p) for t, p in zip(texts, problems)),
            f"{prefix}format_rate": statistics.fmean(format_reward(task.completion_prefix + t) for t in texts),
            f"{prefix}completion_tokens": statistics.fmean(len(ids) for ids, _ in outs)}


def add_intervals(rec: dict) -> dict:
    """Wilson 95% intervals of every evaluation rate in ``rec``, over its ``eval/n`` completions."""
    for key in RATES:
        with_interval(rec, key, rec.get("eval/n", 0))
    return rec


def _stats(policy: Policy, task: Task, problems: Sequence[Problem], items: list[tuple[str, list[int]]]) -> list:
    """(log-probs, entropies) of each (prompt id, completion ids) under ``policy`` now, all in one
    pass whose common prompt prefix runs once (:func:`dgrpo.policy.scoring.completion_stats`). A prompt
    id is looked up in ``problems``, then in the task's validation prompts (a reference written with a
    larger ``eval.n_prompts`` than a resumed run's).

    Raises:
        CheckpointError: a prompt id is in neither (the reference was written for another task).
    """
    by_id = {p.prompt_id: p for p in (*task.val, *problems)}
    missing = next((pid for pid, _ in items if pid not in by_id), None)
    if missing is not None:
        raise CheckpointError(f"{REFERENCE_DIR}/: prompt {missing} of the drift reference is not a validation prompt "
                              f"of this task (delete {REFERENCE_DIR}/ to start the drift metrics again)")
    return completion_stats(policy.model, [policy.prompt_ids(task, by_id[pid]) for pid, _ in items],
                            [ids for _, ids in items]) if items else []


def drift(policy: Policy, task: Task, problems: Sequence[Problem], reference: list[dict], stats: list | None = None) -> dict:
    """``eval/kl_to_start`` and ``eval/entropy`` of ``policy`` on the fixed reference completions
    (module docstring). ``reference`` holds, per prompt, the completion ids and their log-probs under
    the start weights; ``stats`` their (log-probs, entropies) under ``policy`` when already computed
    (the evaluation that wrote the reference)."""
    if stats is None:
        stats = _stats(policy, task, problems, [(item["prompt_id"], item["completion_ids"]) for item in reference])
    kl_sum = ent_sum = tokens = 0.0
    for item, (now, entropy) in zip(reference, stats):
        kl_sum += float((torch.tensor(item["logp"], device=now.device) - now).sum())
        ent_sum += float(entropy.sum())
        tokens += len(item["completion_ids"])
    return {"eval/kl_to_start": kl_sum / tokens, "eval/entropy": ent_sum / tokens} if tokens else {}


def reference_completions(policy: Policy, task: Task, problems: Sequence[Problem],
                          outs: Sequence[tuple[list[int], str]], stats_out: list | None = None,
                          scored: list | None = None) -> list[dict]:
    """The drift reference: each completion's ids and per-token log-probs under ``policy`` now
    (their (log-probs, entropies) are appended to ``stats_out`` when given, for :func:`drift`).
    ``scored``: the completions' (log-probs, entropies) as the stream sampled them
    (:func:`eval_stream`'s ``scores``), one per completion; None: scored here in one pass."""
    kept = [(k, p.prompt_id, list(ids)) for k, (p, (ids, _)) in enumerate(zip(problems, outs)) if ids]
    if scored is None:
        stats = _stats(policy, task, problems, [(pid, ids) for _, pid, ids in kept])
    else:
        stats = [scored[k] for k, _, _ in kept]
    if stats_out is not None:
        stats_out.extend(stats)
    return [{"prompt_id": pid, "completion_ids": ids, "logp": [float(x) for x in lp]}
            for (_, pid, ids), (lp, _) in zip(kept, stats)]


def reference_path(run_dir: Path, owner: int) -> Path:
    """Where node ``owner``'s drift reference lives in the run directory."""
    return Path(run_dir) / REFERENCE_DIR / f"node{owner}.json"


def _rescore(policy: Policy, task: Task, problems: Sequence[Problem], reference: list[dict]) -> Rescore | None:
    """The reference completions to score in the evaluation's stream, or None when one of their prompts
    is not among ``problems`` (then :func:`drift` scores them in a pass of their own)."""
    by_id = {p.prompt_id: p for p in problems}
    if not reference or any(item["prompt_id"] not in by_id for item in reference):
        return None
    return Rescore([policy.prompt_ids(task, by_id[item["prompt_id"]]) for item in reference],
                   [list(item["completion_ids"]) for item in reference])


def load_reference(run_dir: Path, owner: int, make) -> list[dict]:
    """Node ``owner``'s drift reference, ``eval_reference/node{owner}.json`` in the run directory
    (one file per policy owner: processes of a distributed swarm share the folder), written by
    ``make()`` on first use.

    Raises:
        CheckpointError: the file exists but is not a reference list (names the file).
    """
    path = reference_path(run_dir, owner)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(make()))
        tmp.replace(path)
    try:
        data = json.loads(path.read_text())
        ok = isinstance(data, list) and all(isinstance(d, dict) and {"prompt_id", "completion_ids", "logp"} <= set(d)
                                            and len(d["completion_ids"]) == len(d["logp"]) for d in data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        ok = False
    if not ok:
        raise CheckpointError(f"{path}: not an evaluation reference (delete it to start the drift metrics again)")
    return data


def evaluate(run, round_idx: int, samples_path=None) -> dict:
    """Validation accuracy, format rate, length, drift and attack success of every distinct honest
    policy of ``run`` (a :class:`~dgrpo.training.build.Run`, or anything with its cfg, task, swarm
    and run_dir), with Wilson intervals.

    Four completions per policy go to ``samples_path`` (JSON lines) when given.
    """
    cfg, task, swarm = run.cfg, run.task, run.swarm
    start = time.perf_counter()
    problems = list(task.val[: cfg.eval.n_prompts])
    attack = eval_attack(cfg, swarm.attacks)
    targets = attack.eval_problems(task.val)[: cfg.eval.n_prompts] if attack is not None else []
    per_policy: dict[str, list[float]] = {}
    attack_recs = []
    for owner, policy in swarm.honest_policies.items():
        # The evaluation that writes the drift reference scores its sampled completions as it samples
        # them; a later one scores the reference behind the prefill its sampling computes anyway.
        reference = rescore = scored = None
        if cfg.eval.drift and reference_path(run.run_dir, owner).exists():
            reference = load_reference(run.run_dir, owner, list)  # (it exists: read, nothing written)
            rescore = _rescore(policy, task, problems, reference)
        elif cfg.eval.drift:
            scored = []
        outs, target_texts, greedy_outs = eval_stream(policy, cfg, task, problems, targets, owner, cfg.eval.greedy,
                                                      scored, rescore)
        found = rates(task, problems, outs)
        if greedy_outs is not None:
            found.update(rates(task, problems, greedy_outs, "eval/greedy/"))
        if cfg.eval.drift:
            made: list = []  # the reference's scores when this evaluation writes it: drift reuses them
            if reference is None:
                reference = load_reference(run.run_dir, owner,
                                           lambda: reference_completions(policy, task, problems, outs, made, scored))
            found.update(drift(policy, task, problems, reference, made or (rescore.stats if rescore else None)))
        for key, value in found.items():
            per_policy.setdefault(key, []).append(value)
        if attack is not None:
            attack_recs.append(attack.evaluate(target_texts, targets, task))
        if samples_path is not None:
            with open(samples_path, "a") as fh:
                for p, (_, t) in list(zip(problems, outs))[:4]:
                    fh.write(json.dumps({"round": round_idx, "node": owner, "prompt_id": p.prompt_id,
                                         "question": p.question, "completion": t,
                                         "reward": task.reward(t, p)}) + "\n")
    rec: dict = {key: statistics.fmean(values) for key, values in per_policy.items()}
    rec["eval/n"] = len(problems) * len(swarm.honest_policies)
    add_intervals(rec)
    if len(swarm.honest_policies) > 1:
        rec.update({f"eval/accuracy/node{o}": a for o, a in zip(swarm.honest_policies, per_policy["eval/accuracy"])})
    for key in (attack_recs[0] if attack_recs else {}):
        vals = [r[key] for r in attack_recs if r.get(key) is not None]
        rec[f"attack/{key}"] = statistics.fmean(vals) if vals else None
    rec["time/eval"] = round(time.perf_counter() - start, 3)
    return rec
