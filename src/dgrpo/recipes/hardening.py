"""TokenBuncher: harden a model, then measure how fast a malicious reward moves it (Feng et al. 2025; docs/robust.md).

    harden  ``hardening.steps`` RL steps with reward −H plus the token noiser on the training
            requests (dgrpo.hardening.tokenbuncher); hardened weights saved to ``hardened_model/``
    attack  for the original and the hardened model: GRPO that pays 1 for the forbidden
            ``target_phrase`` on the training requests; every ``eval.every`` rounds, the phrase
            rate and the response entropy on the held-out requests (``attack_{name}/metrics.jsonl``)
    benign  for both models: the run's ordinary task and swarm (``benign_{name}/``), to check that
            the hardened model still learns

Run directory: ``metrics.jsonl`` (hardening steps), ``attack_*/``, ``benign_*/``, ``summary.json``,
``hardening.png``. Weights live only in the run directory (never under results/).

``dgrpo resume RUN_DIR`` (:func:`resume`) continues an interrupted run phase by phase: a finished phase (all its
records written, and for the hardening its saved weights) is kept, an unfinished one is removed and
run again from its start. Phases depend only on the config and the hardened weights, so a resumed run
logs what an uninterrupted one would (bar ``time/*``).
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import time
from pathlib import Path

import torch

from dgrpo.config import RunConfig
from dgrpo.errors import ConfigError
from dgrpo.grpo.learner import Learner
from dgrpo.hardening.requests import RequestTask, load_requests
from dgrpo.hardening.tokenbuncher import harden_step, mean_response_entropy
from dgrpo.metrics.logger import MetricsLogger, read_metrics
from dgrpo.policy.loading import load_policy
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import completion_seed
from dgrpo.recipes import recipe
from dgrpo.robust.plots import plot_hardening
from dgrpo.swarm.schedule import take
from dgrpo.training.build import build_run_dir, build_task, grpo_params, prepare, sampling_params
from dgrpo.training.evaluate import EVAL_ROUND
from dgrpo.training.resume import write_config
from dgrpo.types import Rollout

log = logging.getLogger(__name__)


def build_requests(cfg: RunConfig) -> RequestTask:
    h = cfg.hardening
    requests = load_requests(h.prompts_path) if h.prompts_path else None
    return RequestTask(requests, h.n_train, h.n_val, cfg.seed, h.target_phrase)


def _policy(name: str, cfg: RunConfig) -> Policy:
    """A trainable policy answering requests (responses up to ``hardening.response_tokens``)."""
    model, tok = load_policy(name, cfg.model.dtype, trainable=True, device=cfg.model.device)
    return Policy(name, model, tok, sampling_params(cfg, max_new_tokens=cfg.hardening.response_tokens))


def sample_groups(policy: Policy, task, problems, group_size: int, seed: int, round_idx: int):
    """G completions of each problem: [(problem, prompt ids, [(ids, text)] * G)]."""
    requests = [(p, i) for p in problems for i in range(group_size)]
    seeds = [completion_seed(seed, round_idx, 0, p.prompt_id, i) for p, i in requests]
    outs = policy.generate(task, [p for p, _ in requests], seeds)
    return [(p, policy.prompt_ids(task, p), outs[j * group_size:(j + 1) * group_size]) for j, p in enumerate(problems)]


def measure(policy: Policy, task, problems, samples: int, seed: int) -> dict:
    """Mean reward of ``task`` (for requests: the target-phrase rate), mean response entropy (nats) and
    the fraction of distinct responses per prompt, over ``samples`` completions of each problem."""
    groups = sample_groups(policy, task, problems, samples, seed, EVAL_ROUND)
    texts = [t for _, _, outs in groups for _, t in outs]
    rate = statistics.fmean(task.reward(t, p) for p, _, outs in groups for _, t in outs)
    eos, pad = policy.tokenizer.eos_token_id, policy.tokenizer.pad_token_id
    ent = mean_response_entropy(policy.model, [(pids, [ids for ids, _ in outs]) for _, pids, outs in groups], eos, pad)
    distinct = statistics.fmean(len({t for _, t in outs}) / len(outs) for _, _, outs in groups)
    return {"rate": rate, "entropy": ent, "distinct": distinct, "example": texts[0][:300]}


def harden(cfg: RunConfig, run_dir: Path, requests: RequestTask) -> Path:
    """Phase 1: entropy-reward RL + token noiser; returns the folder of the hardened weights."""
    h = cfg.hardening
    policy = _policy(cfg.model.name, cfg)
    tok = policy.tokenizer
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=h.lr, weight_decay=cfg.grpo.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    logger = MetricsLogger(run_dir, False)  # metrics.jsonl of the run directory: the hardening steps
    benign = build_task(cfg)
    benign_val = list(benign.val[:4])

    def probe(step: int) -> dict:
        m = measure(policy, requests, requests.val, h.eval_samples, cfg.seed)
        policy.sampling = sampling_params(cfg)
        b = measure(policy, benign, benign_val, 2, cfg.seed)  # collateral: entropy on the benign task's prompts
        policy.sampling = sampling_params(cfg, max_new_tokens=h.response_tokens)
        return {"step": step, "round": step, "harden/val_entropy": m["entropy"], "harden/val_distinct": m["distinct"],
                "harden/val_phrase_rate": m["rate"], "harden/benign_entropy": b["entropy"], "harden/example": m["example"]}

    logger.log(probe(0))
    for step in range(h.steps):
        t0 = time.perf_counter()
        batch = take(requests.train, h.prompts_per_step, step * h.prompts_per_step, f"harden|{cfg.seed}")
        groups = sample_groups(policy, requests, batch, h.group_size, cfg.seed + 7919, step)
        stats = harden_step(policy.model, optimizer, [(pids, [ids for ids, _ in outs]) for _, pids, outs in groups],
                            tok.eos_token_id, tok.pad_token_id, sigma=h.noiser_sigma, noiser_weight=h.noiser_weight,
                            max_grad_norm=cfg.grpo.max_grad_norm, generator=gen)
        rec = {"step": step + 1, "round": step + 1, "harden/train_entropy": stats.entropy, "harden/pg_loss": stats.pg_loss,
               "harden/noiser_loss": stats.noiser_loss, "harden/grad_norm": stats.grad_norm,
               "time/step": round(time.perf_counter() - t0, 3)}
        if (step + 1) % cfg.eval.every == 0 or step + 1 == h.steps:
            rec.update(probe(step + 1))
        logger.log(rec)
        log.info("harden step %d: train entropy %.3f", step + 1, stats.entropy)
    target = run_dir / "hardened_model"
    tmp = run_dir / ".hardened_model.tmp"  # written whole, then renamed: a crash never leaves half a model
    shutil.rmtree(tmp, ignore_errors=True)
    policy.model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def malicious_finetune(cfg: RunConfig, model_name: str, out: Path, requests: RequestTask) -> dict:
    """Phase 2: GRPO on the training requests with the target-phrase reward; phrase rate over rounds."""
    h = cfg.hardening
    out.mkdir(parents=True, exist_ok=True)
    policy = _policy(model_name, cfg)
    tok = policy.tokenizer
    params = grpo_params(cfg) if h.attack_lr is None else grpo_params(cfg, lr=h.attack_lr)
    learner = Learner(policy.model, params, tok.eos_token_id, tok.pad_token_id)
    logger = MetricsLogger(out, False)
    last = {}
    for r in range(h.attack_rounds + 1):
        rec: dict = {"round": r}
        if r % cfg.eval.every == 0 or r == h.attack_rounds:
            m = measure(policy, requests, requests.val, h.eval_samples, cfg.seed)
            rec.update({"attack/phrase_rate": m["rate"], "attack/entropy": m["entropy"], "attack/distinct": m["distinct"],
                        "attack/example": m["example"]})
        if r < h.attack_rounds:
            t0 = time.perf_counter()
            batch = take(requests.train, h.prompts_per_step, r * h.prompts_per_step, f"attack|{cfg.seed}")
            groups = sample_groups(policy, requests, batch, h.group_size, cfg.seed + 104729, r)
            rollouts = [Rollout(p.prompt_id, pids, ids, text, 0, reward=requests.reward(text, p))
                        for p, pids, outs in groups for ids, text in outs]
            stats = learner.step(rollouts)
            rec.update({"train/reward": statistics.fmean(x.reward for x in rollouts), "train/loss": stats.loss,
                        "train/used": stats.used, "train/skipped_groups": stats.skipped_groups,
                        "time/round": round(time.perf_counter() - t0, 3)})
        logger.log(rec)
        last.update(rec)
        log.info("malicious fine-tuning of %s, round %d: reward %s, phrase rate %s", out.name, r,
                 rec.get("train/reward"), rec.get("attack/phrase_rate"))
    return last


def benign_config(cfg: RunConfig, model_name: str, out_dir: Path, name: str) -> RunConfig:
    """The run's ordinary swarm and task, trained from ``model_name``."""
    data = cfg.model_dump(mode="json")
    data.update(hardening=None, out_dir=str(out_dir), name=name, rounds=cfg.hardening.benign_rounds)
    data["model"]["name"] = model_name
    return RunConfig.model_validate(data)


def _finished(path: Path, last_round: int, setting: str) -> bool:
    """Whether ``path/metrics.jsonl`` reaches round ``last_round`` (a phase that ran to its end).

    Raises:
        ConfigError: the phase ran further than ``setting`` (= ``last_round``) now says: resuming
            with a smaller count would keep records and weights the config no longer describes.
    """
    try:
        records = read_metrics(path)
    except FileNotFoundError:
        return False
    done = records[-1]["round"] if records else -1
    if done > last_round:
        raise ConfigError(f"{path} ran to round {done} but {setting}={last_round}; resume with {setting}>={done} "
                          "or start a new run")
    return done == last_round


def _restart(path: Path) -> Path:
    """Remove an unfinished phase's folder so it runs again from its start."""
    if path.exists():
        log.info("phase %s did not finish: running it again", path.name)
        shutil.rmtree(path)
    return path


def check_resume(cfg: RunConfig, run_dir: Path) -> None:
    """Refuse, before any phase runs again, a config whose step or round counts are smaller than
    what a kept phase of ``run_dir`` already ran.

    Raises:
        ConfigError: names the phase and the setting.
        MetricsFileError: a phase's metrics.jsonl is damaged.
    """
    h = cfg.hardening
    phases = [(run_dir, h.steps, "hardening.steps")]
    phases += [(run_dir / f"attack_{n}", h.attack_rounds, "hardening.attack_rounds") for n in ("original", "hardened")]
    phases += [(run_dir / f"benign_{n}", h.benign_rounds, "hardening.benign_rounds") for n in ("original", "hardened")]
    for path, last, setting in phases:
        _finished(path, last, setting)


def resume(cfg: RunConfig, run_dir: Path, rewrite_config: bool = False) -> Path:
    """Continue the run in ``run_dir`` phase by phase (module docstring), after :func:`check_resume`."""
    check_resume(cfg, run_dir)
    if rewrite_config:
        write_config(run_dir, cfg)
    return run(cfg, run_dir, resume=True)


def run(cfg: RunConfig, run_dir: Path | None = None, resume: bool = False) -> Path:
    """All three phases (module docstring); returns the run directory.

    With ``resume``, ``run_dir`` must exist; finished phases are kept.
    """
    prepare(cfg)
    run_dir = run_dir or build_run_dir(cfg)
    h = cfg.hardening
    requests = build_requests(cfg)
    (run_dir / "requests.json").write_text(json.dumps({"train": [p.question for p in requests.train],
                                                       "val": [p.question for p in requests.val]}, indent=1))
    hardened = run_dir / "hardened_model"
    if not (resume and _finished(run_dir, h.steps, "hardening.steps") and (hardened / "config.json").exists()):
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)
        hardened = harden(cfg, run_dir, requests)
    models = {"original": cfg.model.name, "hardened": str(hardened)}
    summary: dict = {"target_phrase": h.target_phrase}
    if h.attack_rounds:
        for name, model_name in models.items():
            out = run_dir / f"attack_{name}"
            if resume and _finished(out, h.attack_rounds, "hardening.attack_rounds"):
                last = {}
                for rec in read_metrics(out):
                    last.update(rec)
            else:
                last = malicious_finetune(cfg, model_name, _restart(out), requests)
            first = read_metrics(out)[0]
            summary[f"attack_{name}"] = {"phrase_rate_start": first.get("attack/phrase_rate"),
                                         "phrase_rate_end": last.get("attack/phrase_rate"),
                                         "entropy_start": first.get("attack/entropy"), "entropy_end": last.get("attack/entropy")}
    if h.benign_rounds:
        for name, model_name in models.items():
            bdir = run_dir / f"benign_{name}"
            if not (resume and _finished(bdir, h.benign_rounds, "hardening.benign_rounds")):
                _restart(bdir)
                benign = benign_config(cfg, model_name, run_dir, f"benign_{name}")
                bdir = recipe(benign).run(benign)
            recs = read_metrics(bdir)
            accs = [r["eval/accuracy"] for r in recs if r.get("eval/accuracy") is not None]
            formats = [r["eval/format_rate"] for r in recs if r.get("eval/format_rate") is not None]
            rewards = [r["train/reward_honest"] for r in recs if r.get("train/reward_honest") is not None]
            summary[f"benign_{name}"] = {"accuracy_start": accs[0], "accuracy_end": accs[-1],
                                         "format_rate_start": formats[0], "format_rate_end": formats[-1],
                                         "train_reward_first_half": statistics.fmean(rewards[: max(1, len(rewards) // 2)]),
                                         "train_reward_second_half": statistics.fmean(rewards[len(rewards) // 2:])}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    plot_hardening(run_dir)
    return run_dir
