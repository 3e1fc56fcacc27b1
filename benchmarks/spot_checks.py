"""Spot checks (issue 36 item 3): the coverage/cost curve, measured, and what a cheater gets, analytic and simulated.

    python benchmarks/spot_checks.py --threads 1 --out results/spot_checks

1. Cost and coverage, measured. The ``replay`` (fast) and ``tolerant_replay`` defenses, built from their
   configs with ``spot_fraction`` f and ``position_fraction`` q, judge 64 received completions on
   precomputed float32 logits of SmolLM2-135M's shape (32 positions × 49,152 tokens, N(0, 3²), as
   ``benchmarks/check_cost.py``); 8 of them carry a one-token edit (a top-k token the seed does not pick,
   at a random position: on these logits, which do not depend on the prefix, exactly one departing
   token). Reported: ms per received completion (best of ``--repeats``, one round), and over ``--rounds``
   rounds (the same logits, other message keys, so other choices) the share of messages and positions
   checked and of the edits caught (expected f·q). ``replay`` with ``method: regenerate`` is timed the
   same way on 64 honest completions of SmolLM2-135M-Instruct (arithmetic prompts; ``--regenerate-model
   tiny``: a tiny random Llama instead, whose times say nothing of SmolLM2's).
2. The cheater (:mod:`dgrpo.defenses.spot_analysis`): for a poison rate p, the probability of a catch per
   round, the expected round of the ban and the expected gain over sending honestly, in closed form and
   simulated with the real checker and ban list, at the default setting (spot_fraction 0.1,
   position_fraction 1, ban_after 1, 8 messages a round, 12 rounds, a poison worth 2 honest messages),
   and the gain over a grid of f and ban_after; and a cheater honest until its last k rounds that then poisons
   every message (``hit_and_run``: its gain per k, closed form and simulated; per f the best k's gain, the poisons
   one roster identity gets accepted, and the f from which its last round stops paying).

Writes ``spot_checks.json`` and ``spot_checks.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

FRACTIONS = [0.05, 0.1, 0.25, 0.5, 1.0]
POISON_RATES = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0]


def _defense(kind: str, f: float, q: float, model=None, max_new_tokens: int = 32, method: str = "fast"):
    from dgrpo.config import load_config
    from dgrpo.defenses import build_defense

    extra = ", method: regenerate" if method == "regenerate" else ""
    cfg = load_config(overrides=[f"sampling.max_new_tokens={max_new_tokens}",
                                 f"defenses=[{{kind: {kind}, spot_fraction: {f}, position_fraction: {q}, spot_seed: 7{extra}}}]"])
    tok = SimpleNamespace(eos_token_id=-1, pad_token_id=0)  # eos never sampled here: every completion runs to the limit
    return build_defense(cfg.defenses[0], cfg, SimpleNamespace(tokenizer=tok, model=model), task=None)


def _time(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _rollouts(logits, rng, params, round_idx: int, poisoned: set[int]) -> list:
    """One round's 64 received completions on ``logits``: the seeded sampler's choice, the ``poisoned``
    ones with one position changed to another top-k token (a different random position each round)."""
    from dgrpo.policy.sampling import choose_tokens, gumbel_table
    from dgrpo.types import Rollout

    n, t, _ = logits.shape
    out = []
    for i in range(n):
        ids = choose_tokens(logits[i], gumbel_table(i, t, params.top_k), params).tolist()
        if i in poisoned:
            pos = rng.randrange(t)
            ids[pos] = next(int(x) for x in logits[i, pos].topk(params.top_k).indices if int(x) != ids[pos])
        out.append(Rollout("p", [1], ids, "", i % 4, seed=i, key=(i % 4, round_idx, "p", i),
                           label="poisoned" if i in poisoned else "honest"))
    return out


def measured_fast(repeats: int, rounds: int) -> list[dict]:
    from dgrpo.policy.sampling import SamplingParams

    n, t, v = 64, 32, 49152
    params = SamplingParams(10, 1.0, t)
    logits = torch.randn(n, t, v, generator=torch.Generator().manual_seed(0)) * 3
    rng, poisoned = random.Random(0), set(range(0, n, 8))
    batches = [_rollouts(logits, rng, params, r, poisoned) for r in range(rounds)]  # keys differ by round
    out = []
    for kind in ("replay", "tolerant_replay"):
        for q in (1.0, 0.25):
            for f in FRACTIONS:
                d = _defense(kind, f, q)
                caught = 0
                for batch in batches:
                    verdicts = d.inspect(batch, logits)
                    assert all(verdicts[i].accepted for i in range(n) if i not in poisoned), "an honest message was rejected"
                    caught += sum(not verdicts[i].accepted for i in poisoned)
                c = dict(d.spot.counters)
                seconds = _time(lambda: d.inspect(batches[0], logits), repeats)
                spot = f < 1 or q < 1
                out.append({"kind": kind, "spot_fraction": f, "position_fraction": q,
                            "ms_per_completion": round(seconds / n * 1e3, 3),
                            "messages_checked": c["spot_checked"] / (rounds * n) if spot else 1.0,
                            "positions_checked": c["positions_checked"] / max(c["positions_total"], 1) if spot else 1.0,
                            "edits_caught": caught, "edits": rounds * len(poisoned), "expected_catch": f * q})
    return out


def measured_regenerate(repeats: int, model_name: str) -> list[dict]:
    from dgrpo.policy.sampling import SamplingParams, sample
    from dgrpo.types import Rollout

    n, t = 64, 32
    params = SamplingParams(10, 1.0, t)
    if model_name == "tiny":
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)).float().eval()
        prompts = [[5 + i % 7, 6, 7, 8] for i in range(n)]
    else:
        from dgrpo.policy.loading import load_policy
        from dgrpo.policy.policy import Policy
        from dgrpo.tasks.arithmetic import ArithmeticTask

        model, tokenizer = load_policy()
        model.eval()
        task = ArithmeticTask(seed=0)
        policy = Policy("smollm2", model, tokenizer, params)
        prompts = [policy.prompt_ids(task, task.train[i // 8]) for i in range(n)]
    outs = sample(model, prompts, list(range(n)), params, -1, 0)
    rollouts = [Rollout("p", prompts[i], outs[i], "", i % 4, seed=i, key=(i % 4, 0, "p", i)) for i in range(n)]
    out = []
    for f in FRACTIONS:
        d = _defense("replay", f, 1.0, model=model, method="regenerate")
        seconds = _time(lambda: d.inspect(rollouts), repeats)
        out.append({"kind": f"replay (regenerate, {model_name})", "spot_fraction": f, "position_fraction": 1.0,
                    "ms_per_completion": round(seconds / n * 1e3, 3),
                    "messages_checked": d.spot.counters["spot_checked"] / ((repeats + 1) * n) if f < 1 else 1.0})
    return out


def cheater(trials: int) -> dict:
    from dgrpo.defenses.spot_analysis import (DEFAULT, break_even_benefit, caught_per_round, deterring_fraction,
                                            expected_ban_round, expected_gain, hit_and_run_gain, poisons_per_identity,
                                            simulate)

    rows = []
    for p in POISON_RATES:
        sim = simulate(p, DEFAULT, trials, seed=36, rounds=2000)
        rows.append({"p": p, "caught_per_round": caught_per_round(p, DEFAULT), "caught_per_round_sim": sim["caught_per_round"],
                     "ban_round": expected_ban_round(p, DEFAULT), "ban_round_sim": sim["ban_round"],
                     "gain": expected_gain(p, DEFAULT), "gain_sim": sim["gain"], "break_even_benefit": break_even_benefit(p, DEFAULT)})
    grid = [{"spot_fraction": f, "ban_after": b, "p": p,
             "gain": expected_gain(p, dataclasses.replace(DEFAULT, fraction=f, ban_after=b)),
             "ban_round": expected_ban_round(p, dataclasses.replace(DEFAULT, fraction=f, ban_after=b))}
            for f in FRACTIONS for b in (1, 2, 3) for p in (0.05, 0.25, 1.0)]
    # a cheater honest until its last k rounds, then poisoning every message (review u36 A): the gain per k, closed
    # form and simulated, and per spot_fraction the best k's gain and the poisons one identity gets accepted
    hit_and_run = [{"k": k, "gain": hit_and_run_gain(k, DEFAULT),
                    "gain_sim": simulate(1.0, DEFAULT, trials, seed=37 + k, start=DEFAULT.horizon - k)["gain"]}
                   for k in (1, 2, 3, 6, 12)]
    by_fraction = [{"spot_fraction": f, "best_k_gain": max(hit_and_run_gain(k, s) for k in range(1, s.horizon + 1)),
                    "poisons_per_identity": poisons_per_identity(s)}
                   for f in FRACTIONS for s in [dataclasses.replace(DEFAULT, fraction=f)]]
    return {"default": dataclasses.asdict(DEFAULT), "trials": trials, "rows": rows, "grid": grid,
            "hit_and_run": {"rows": hit_and_run, "by_fraction": by_fraction,
                            "deterring_fraction": deterring_fraction(DEFAULT)}}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dgrpo.defenses.spot_analysis import DEFAULT, expected_gain

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    regen = sorted({r["kind"] for r in report["cost"] if r["kind"].startswith("replay (regenerate")})
    for kind, q in (("replay", 1.0), ("replay", 0.25), ("tolerant_replay", 1.0), *((k, 1.0) for k in regen)):
        pts = [r for r in report["cost"] if r["kind"] == kind and r["position_fraction"] == q]
        full = next(r["ms_per_completion"] for r in pts if r["spot_fraction"] == 1.0)
        a.plot([r["messages_checked"] for r in pts], [r["ms_per_completion"] / full for r in pts], "o-", label=f"{kind}, q={q}")
    a.plot([0, 1], [0, 1], "k:", lw=1, label="cost ∝ f")
    a.set(xlabel="share of messages checked (measured; spot_fraction f)", ylabel="check time / time at f = 1", title="cost of checking, measured")
    a.legend(fontsize=7)
    ps = [i / 100 for i in range(1, 101)]
    for ban in (1, 2, 3):
        a_s = dataclasses.replace(DEFAULT, ban_after=ban)
        b.plot(ps, [expected_gain(p, a_s) for p in ps], label=f"closed form, ban_after={ban}")
    rows = report["cheater"]["rows"]
    b.errorbar([r["p"] for r in rows], [r["gain_sim"]["mean"] for r in rows], yerr=[2 * r["gain_sim"]["se"] for r in rows],
               fmt="ko", ms=3, label="simulated (ban_after=1)")
    b.axhline(0, color="grey", lw=0.8)
    b.set(xlabel="poison rate p", ylabel="expected gain (honest-message units)",
          title="cheater's gain, f = 0.1, 8 msgs/round, 12 rounds, b = 1")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=16, help="rounds of 64 messages for the measured coverage")
    parser.add_argument("--regenerate-model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--out", default="results/spot_checks")
    parser.add_argument("--parts", nargs="+", choices=["fast", "regenerate", "cheater"], default=["fast", "regenerate", "cheater"],
                        help="what to run; the other parts are kept from --out/spot_checks.json when it exists")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    command = ("python benchmarks/spot_checks.py " + " ".join(sys.argv[1:])).strip()
    out = Path(args.out)
    old = json.loads((out / "spot_checks.json").read_text()) if (out / "spot_checks.json").exists() else {}
    cost = measured_fast(args.repeats, args.rounds) if "fast" in args.parts else \
        [r for r in old.get("cost", []) if not r["kind"].startswith("replay (regenerate")]
    if "regenerate" in args.parts:
        cost += measured_regenerate(args.repeats, args.regenerate_model)
    kept = [r for r in old.get("cost", []) if r["kind"].startswith("replay (regenerate")  # other models' rows
            and not any(c["kind"] == r["kind"] for c in cost)]
    report = {"commands": old.get("commands", [old["command"]] if "command" in old else []) + [command],
              "threads": args.threads, "torch": torch.__version__, "cost": cost + kept,
              "cheater": cheater(args.trials) if "cheater" in args.parts else old["cheater"]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "spot_checks.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(report, out / "spot_checks.png")
    print(json.dumps({"cost": report["cost"], "cheater": report["cheater"]["rows"]}, indent=1))


if __name__ == "__main__":
    main()
