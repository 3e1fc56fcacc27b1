"""Where an evaluation of the README main job spends its CPU seconds (issue 38).

    PYTHONPATH=src nice -n 10 python benchmarks/eval_profile.py --threads 1 --split \\
        --out benchmarks/results/issue38_eval_profile/after_t1.json [override ...]

Builds the README main job (``dgrpo run``'s embedded defaults, ``threads=--threads``, then the given
``key=value`` overrides) in a temporary run directory and profiles two evaluations of the untrained
policy (:func:`dgrpo.training.evaluate.evaluate`, with a samples file as the training loop passes
one): the first writes the drift reference (as round 0 does), the second scores it again (as rounds
6 and 12 do). Each runs under :mod:`cProfile` with :func:`time.process_time` as its clock, so every
figure is **CPU seconds of this process** (all its threads), which other sessions' load changes far
less than wall seconds at ``--threads 1`` (``benchmarks/round_profile.py`` says why).

Parts (cumulative CPU seconds of a function, summed over its calls; ``null`` when the checkout lacks
it): ``stream`` (``Policy.generate``: the sampled, attack-target and greedy completions), inside it
``noise`` (``gumbel_table``), ``choose`` (``choose_rows``: top-k and the decision), ``detokenize``
(``decode_completion``) and ``model`` (every forward of the model inside the stream, split by a
hook into ``prefill`` — forwards of more than one position — and ``decode steps``); ``tokenize``
(``Policy.prompt_ids``, cached after a prompt's first use); ``rewards`` (``rates``: answer
checking, format and length); ``drift scoring`` (``completion_stats``, the reference's forward);
``rescore`` (``stats_behind_prefill``: a later evaluation's scoring of the reference inside the
stream, behind its prefill; its forwards are not counted in ``prefill``); ``drift`` (``drift``:
scoring, when not done in the stream, plus the KL and entropy sums); ``reference`` (``load_reference``:
the first evaluation's scoring of its sampled completions and the JSON write, and later the read);
``total`` (the whole evaluation). Also: generated tokens per stream (sampled, greedy), the decoding
steps and the rows summed over them, and the 15 functions with the most CPU seconds of their own.

``--split`` also times the stream's parts apart, each a separate call at the same ``max_rows``
(CPU seconds and tokens): the 128 sampled completions alone, the 128 greedy ones alone, and both in
one stream as the evaluation asks them. Prints one JSON object; ``--out`` writes it too.
"""

from __future__ import annotations

import argparse
import cProfile
import contextlib
import json
import os
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

PARTS = {  # part: (file name suffix, function name)
    "stream": ("policy/policy.py", "generate"),
    "noise": ("policy/sampling.py", "gumbel_table"),
    "choose": ("policy/stream.py", "choose_rows"),
    "detokenize": ("policy/chat.py", "decode_completion"),
    "tokenize": ("policy/policy.py", "prompt_ids"),
    "rewards": ("training/evaluate.py", "rates"),
    "drift scoring": ("policy/scoring.py", "completion_stats"),
    "rescore": ("policy/rescore.py", "stats_behind_prefill"),
    "drift": ("training/evaluate.py", "drift"),
    "reference": ("training/evaluate.py", "load_reference"),
}


def cumulative(stats: pstats.Stats, suffix: str, name: str) -> float | None:
    """CPU seconds inside ``name`` of a file ending in ``suffix`` (summed over same-named definitions), or None."""
    found = [v[3] for (path, _line, func), v in stats.stats.items() if func == name and path.endswith(suffix)]
    return round(sum(found), 3) if found else None


class ForwardClock:
    """CPU seconds of a model's forwards, split into prefill (more than one position) and decode steps."""

    def __init__(self, model):
        self.parts = {"prefill": 0.0, "decode steps": 0.0}
        self.steps = self.rows = 0
        self.active = False  # only the stream's forwards count (not the drift scoring's)
        self._start = None
        self._handles = [model.register_forward_pre_hook(self._pre, with_kwargs=True),
                         model.register_forward_hook(self._post, with_kwargs=True)]

    def _pre(self, _module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._start = (time.process_time(), tuple(ids.shape))

    def _post(self, _module, args, kwargs, _out):
        start, shape = self._start
        if not self.active:
            return
        spent = time.process_time() - start
        if shape[1] == 1:
            self.parts["decode steps"] += spent
            self.steps += 1
            self.rows += shape[0]
        else:
            self.parts["prefill"] += spent

    def remove(self):
        for h in self._handles:
            h.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--split", action="store_true", help="also time sampled, greedy and both streams apart")
    parser.add_argument("--out")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()

    import torch

    import dgrpo
    from dgrpo.config import load_config
    from dgrpo.training import evaluate as evaluate_mod
    from dgrpo.training.build import build_run

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, [f"out_dir={tmp}", "name=eval_profile", f"threads={args.threads}", *args.overrides])
        with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON alone
            run = build_run(cfg)
        policy = next(iter(run.swarm.honest_policies.values()))
        clock = ForwardClock(policy.model)
        sampling_mod = sys.modules["dgrpo.policy.sampling"]
        rescore = getattr(sampling_mod, "stats_behind_prefill", None)
        if rescore is not None:  # (a checkout that has it) its forwards are the drift's, not the stream's

            def stats_behind_prefill(*a, **k):
                clock.active = False
                try:
                    return rescore(*a, **k)
                finally:
                    clock.active = True

            sampling_mod.stats_behind_prefill = stats_behind_prefill
        report: dict = {"command": " ".join(["python", "benchmarks/eval_profile.py", *sys.argv[1:]]),
                        "dgrpo": str(Path(dgrpo.__file__).parent), "threads": torch.get_num_threads(),
                        "config": args.overrides, "evaluations": []}
        samples = Path(tmp) / "samples.jsonl"
        for label in ("first (writes the reference)", "later (scores the reference)"):
            clock.parts = {"prefill": 0.0, "decode steps": 0.0}
            clock.steps = clock.rows = 0
            tokens = {}
            generate = type(policy).generate

            def generate_counted(self, task, problems, seeds, **k):
                clock.active = True
                try:
                    outs = generate(self, task, problems, seeds, **k)
                finally:
                    clock.active = False
                temps = k.get("temperatures") or [self.sampling.temperature] * len(outs)
                for t, (ids, _) in zip(temps, outs):
                    key = "greedy" if t == 0 else "sampled"
                    tokens[key] = tokens.get(key, 0) + len(ids)
                return outs

            profile = cProfile.Profile(time.process_time)
            wall = time.perf_counter()
            type(policy).generate = generate_counted
            try:
                profile.enable()
                rec = evaluate_mod.evaluate(run, 0, samples)
                profile.disable()
            finally:
                type(policy).generate = generate
            wall = time.perf_counter() - wall
            stats = pstats.Stats(profile)
            parts = {part: cumulative(stats, *where) for part, where in PARTS.items()}
            parts["stream"] = cumulative(stats, "eval_profile.py", "generate_counted")
            if rescore is not None:
                parts["rescore"] = cumulative(stats, "eval_profile.py", "stats_behind_prefill")
            parts["total"] = round(stats.total_tt, 3)
            forward_parts = {k: round(v, 3) for k, v in clock.parts.items()}
            own = sorted(((v[2], f"{Path(path).name}:{line}({func})") for (path, line, func), v in stats.stats.items()),
                         reverse=True)[:15]
            report["evaluations"].append({
                "label": label, "cpu_seconds": parts, "forwards_cpu_seconds": forward_parts,
                "decode_steps": clock.steps, "decode_rows_summed": clock.rows, "generated_tokens": tokens,
                "wall_seconds": round(wall, 3),
                "metrics": {k: v for k, v in rec.items() if not k.startswith("time/")},
                "own_cpu_seconds": [{"function": name, "seconds": round(s, 3)} for s, name in own]})
        if args.split:
            report["split"] = split_stream(run, policy, clock, evaluate_mod)
        clock.remove()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report.update({"user_sys_seconds": round(usage.ru_utime + usage.ru_stime, 3),
                   "peak_rss_gb": round(usage.ru_maxrss / 2**20, 2),
                   "loadavg": {"before": load_before, "after": os.getloadavg()}})
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


def split_stream(run, policy, clock, evaluate_mod) -> dict:
    """CPU seconds and tokens of the evaluation's stream asked three ways (module docstring)."""
    from dgrpo.policy.sampling import completion_seed

    cfg, task = run.cfg, run.task
    problems = list(task.val[: cfg.eval.n_prompts])
    seeds = [completion_seed(cfg.seed, evaluate_mod.EVAL_ROUND, 0, p.prompt_id, 0) for p in problems]
    temp = policy.sampling.temperature if cfg.eval.temperature is None else cfg.eval.temperature
    asks = {"sampled alone": (problems, seeds, [temp] * len(problems)),
            "greedy alone": (problems, seeds, [0.0] * len(problems)),
            "sampled + greedy, one stream": (problems * 2, seeds * 2, [temp] * len(problems) + [0.0] * len(problems))}
    out = {}
    for name, (probs, sds, temps) in asks.items():
        clock.parts = {"prefill": 0.0, "decode steps": 0.0}
        clock.steps = clock.rows = 0
        c0 = time.process_time()
        clock.active = True
        try:
            outs = policy.generate(task, probs, sds, temperatures=temps, max_rows=len(problems))
        finally:
            clock.active = False
        out[name] = {"cpu_seconds": round(time.process_time() - c0, 3),
                     "forwards_cpu_seconds": {k: round(v, 3) for k, v in clock.parts.items()},
                     "decode_steps": clock.steps, "decode_rows_summed": clock.rows,
                     "tokens": sum(len(ids) for ids, _ in outs),
                     "longest": max(len(ids) for ids, _ in outs)}
    return out


if __name__ == "__main__":
    main()
