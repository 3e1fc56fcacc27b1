"""Scale, simulated (issue 36 item 5): per-node verification cost and rounds until every cheater is banned,
for m = 4 … 256 nodes in one process, with full checking and with spot checks.

    python benchmarks/scale.py --nodes 4 16 64 256 --out results/scale

The swarm. m nodes share one tiny random Llama (2 layers, width 64, the tests' 400-token BPE vocabulary,
float32): a homogeneous swarm, where every node's logits are the same, so each message's verdict is
computed once and each receiver's choice decides whether it sees it. Each round every node answers its
own prompt with G = ``--group`` completions of ≤ ``--max-new-tokens`` tokens (dgrpo's seeded sampler,
seeds bound to (round, node, prompt, index)) and signs them (Ed25519, :mod:`dgrpo.swarm.identity`); a
share ``--malicious`` of the nodes are cheaters that replace one random token of each message with
probability ``--poison`` (a random vocabulary token: a departure fast replay sees wherever it is
checked). Every node receives every other node's messages; an honest receiver verifies the signature
of each and checks the content with fast exact replay (:func:`dgrpo.verify.replay.replay_mismatch`) on
the messages its :class:`~dgrpo.verify.spot.SpotChecker` (its own secret) picks; a caught message is a
strike, ``--ban-after`` strikes ban the sender for that receiver.

Modes (each on the same traffic, each with its own ban state):

* ``full``: every message checked, bans local (each receiver counts its own catches);
* ``spot``: spot_fraction ``--fraction``, bans local;
* ``spot_shared``: spot_fraction ``--fraction``, catches shared: a caught message is signed by its
  sender, so it is a proof; the catcher forwards it, every honest node re-checks it (one message) and
  strikes the sender (deduplicated by message key);
* ``budget_shared``: each receiver checks ``--budget`` messages a round in expectation (spot_fraction
  budget / ((m − 1)·G), at most 1), catches shared: constant per-node cost as m grows.

Measured for ``--measure`` honest receivers in each of the first ``--timed-rounds`` rounds: signature
verification of every received message (the same in every mode), content checking standalone (the forward
pass over the checked messages, :func:`dgrpo.policy.scoring.group_logits`, plus the check) and fused
(the check alone, on logits the update computes anyway), and proof re-checks. Bytes: each message as
framed on the wire (:func:`dgrpo.transports.framing.frame` of its JSON), from peers not banned by the
receiver, plus forwarded proofs. After the timed rounds only the cheaters' messages are generated and
checked (what decides the bans; no honest message departed in the timed rounds, ``honest_rejected``, and
the bans are per sender). Rounds run until every honest node has banned every cheater in every mode or
``--rounds``; the closed form (:mod:`dgrpo.defenses.spot_analysis`) of the expected round is given
beside. Writes ``scale.json`` and ``scale.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MODES = ("full", "spot", "spot_shared", "budget_shared")


def _fraction(mode: str, m: int, args) -> float:
    if mode == "full":
        return 1.0
    if mode == "budget_shared":
        return min(1.0, args.budget / ((m - 1) * args.group))
    return args.fraction


def _all_banned_by_round(r: int, m: int, cheaters: int, mode: str, args) -> float:
    """P[every honest node has banned every cheater within r rounds] (ban_after 1, closed form).

    A cheater's K poisoned messages in r rounds are Binomial(G·r, p), shared by all receivers; given K = k
    each of the h receivers has caught it independently with probability 1 − (1 − f)^k (local bans), or
    one catch anywhere bans it everywhere (shared). Cheaters are independent."""
    f, h, n, p = _fraction(mode, m, args), m - cheaters, args.group * r, args.poison
    if mode.endswith("shared"):  # not caught: each poisoned message escapes all h receivers
        return (1 - (1 - p * (1 - (1 - f) ** h)) ** n) ** cheaters
    if p >= 1:
        return (1 - (1 - f) ** n) ** (h * cheaters)
    per_cheater = sum(math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                               + (k * math.log(p) if k else 0.0) + (n - k) * math.log1p(-p))
                      * (1 - (1 - f) ** k) ** h for k in range(1, n + 1))
    return per_cheater ** cheaters


def expected_rounds_all_banned(m: int, cheaters: int, mode: str, args) -> float | None:
    """E[round by which every honest node has banned every cheater] for ban_after 1 (None otherwise)."""
    if args.ban_after != 1:
        return None
    total, r = 0.0, 0
    while r < 100_000:
        tail = 1 - _all_banned_by_round(r, m, cheaters, mode, args)
        total += tail
        if tail < 1e-9:
            break
        r += 1
    return total


def run(m: int, args) -> dict:
    from tests.conftest import build_model, build_tokenizer

    from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
    from dgrpo.policy.scoring import group_logits
    from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys, run_context
    from dgrpo.transports.framing import frame
    from dgrpo.types import Message
    from dgrpo.verify.replay import replay_mismatch
    from dgrpo.verify.spot import SpotChecker, rollout_digest

    tok = build_tokenizer()
    model = build_model(len(tok)).eval()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    params = SamplingParams(10, 1.0, args.max_new_tokens)
    keys = generate_keys(m)
    context = run_context("scale", f"m{m}")
    roster, signers = Roster.of(keys), {n: Signer(n, k, context) for n, k in keys.items()}
    cheaters = max(1, round(args.malicious * m))
    bad_nodes = set(range(m - cheaters, m))
    honest = [n for n in range(m) if n not in bad_nodes]
    rng = random.Random(args.seed)
    secret = {(mode, v): SpotChecker(_fraction(mode, m, args), seed=rng.getrandbits(62)) for mode in MODES for v in honest}
    banned = {mode: {v: set() for v in honest} for mode in MODES}  # receiver → senders it banned
    strikes = {mode: {v: {} for v in honest} for mode in MODES}
    all_banned_round = {mode: None for mode in MODES}
    measured = honest[: args.measure]
    per_round, timing = [], {mode: [] for mode in MODES}
    r = 0
    while r < args.rounds and any(v is None for v in all_banned_round.values()):
        timed = r < args.timed_rounds
        # timed rounds: every node's messages; later rounds only the cheaters' (an honest message cannot
        # strike its sender: none departed in the timed rounds, ``honest_rejected``), for the bans
        senders = list(range(m)) if timed else sorted(bad_nodes)
        prompts = {n: [1] + [rng.randrange(3, len(tok)) for _ in range(6)] for n in senders}
        reqs = [(n, i) for n in senders for i in range(args.group)]
        seed = {(n, i): completion_seed(args.seed, r, n, f"p{n}", i) for n, i in reqs}
        t0 = time.perf_counter()
        outs = sample(model, [prompts[n] for n, _ in reqs], [seed[k] for k in reqs], params, eos, pad)
        gen_s = time.perf_counter() - t0
        msgs, poisoned = {}, set()
        for (n, i), ids in zip(reqs, outs):
            ids = list(ids)
            if n in bad_nodes and rng.random() < args.poison:
                t = rng.randrange(len(ids))
                ids[t] = next(x for x in (rng.randrange(3, len(tok)) for _ in range(100)) if x not in (ids[t], eos))
                poisoned.add((n, i))
            msgs[(n, i)] = signers[n].sign(Message(n, r, f"p{n}", i, tok.decode(ids), tuple(ids), seed[(n, i)], "tiny"))
        size = {k: len(frame(json.dumps(msg.to_dict()).encode())) for k, msg in msgs.items()}
        # the verdict of every message, once (homogeneous: the same for every receiver)
        logits, departs = {}, {}
        for n in senders:
            with torch.no_grad():
                lg = group_logits(model, prompts[n], [list(msgs[(n, i)].token_ids) for i in range(args.group)], pad)
            for i in range(args.group):
                logits[(n, i)] = lg[i]
                departs[(n, i)] = replay_mismatch(lg[i], list(msgs[(n, i)].token_ids), seed[(n, i)], params, eos) is not None
        digest = {k: rollout_digest((msg.node, msg.round, msg.prompt_id, msg.index), msg.seed, msg.token_ids) for k, msg in msgs.items()}
        row = {"round": r, "senders": len(senders), "generation_s": round(gen_s, 3), "poisoned": len(poisoned),
               "honest_rejected": sum(departs[k] for k in msgs if k not in poisoned),
               "poison_not_departing": sum(not departs[k] for k in poisoned), "modes": {}}
        for mode in MODES:
            if all_banned_round[mode] is not None and not timed:
                continue
            received = {v: [k for k in msgs if k[0] != v and k[0] not in banned[mode][v]] for v in honest}
            if timed:
                chosen = {v: [k for k in received[v] if secret[(mode, v)].checks(digest[k])] for v in honest}
                caught_by = {v: [k for k in chosen[v] if departs[k]] for v in honest}
            else:  # only what decides the bans: which departing messages each receiver checks
                caught_by = {v: [k for k in received[v] if departs[k] and secret[(mode, v)].checks(digest[k])] for v in honest}
            proofs = sorted({k for v in honest for k in caught_by[v]}) if mode.endswith("shared") else []
            stat = {"proofs": len(proofs)}
            if timed:
                forwarded = [sum(size[k] for k in proofs) - sum(size[k] for k in caught_by[v]) if proofs else 0 for v in honest]
                stat.update({"checked_mean": _mean(len(chosen[v]) for v in honest),
                             "bytes_mean": _mean(sum(size[k] for k in received[v]) for v in honest),
                             "proof_bytes_mean": _mean(forwarded)})
                stat["timed"] = [_time_node(msgs, prompts, seed, logits, received[v], chosen[v],
                                            [k for k in proofs if k not in set(caught_by[v])], roster, context, model,
                                            params, eos, pad, SignatureVerifier, group_logits, replay_mismatch)
                                 for v in measured]
                timing[mode].extend(stat["timed"])
            # strikes, then bans (from the next round on)
            for v in honest:
                for k in (proofs if mode.endswith("shared") else caught_by[v]):
                    if k[0] in banned[mode][v]:
                        continue
                    strikes[mode][v][k[0]] = strikes[mode][v].get(k[0], 0) + 1
                    if strikes[mode][v][k[0]] >= args.ban_after:
                        banned[mode][v].add(k[0])
            pairs = sum(len(banned[mode][v] & bad_nodes) for v in honest)
            stat.update({"banned_pairs": pairs, "pairs": len(honest) * cheaters,
                         "honest_banned_pairs": sum(len(banned[mode][v] - bad_nodes) for v in honest)})
            if pairs == len(honest) * cheaters and all_banned_round[mode] is None:
                all_banned_round[mode] = r + 1
            row["modes"][mode] = stat
        per_round.append(row)
        print(json.dumps({"m": m, "round": r, **{md: x["banned_pairs"] for md, x in row["modes"].items()}}), file=sys.stderr, flush=True)
        r += 1
    summary, last = {}, {mode: next(x["modes"][mode] for x in reversed(per_round) if mode in x["modes"]) for mode in MODES}
    for mode in MODES:
        t = timing[mode]
        first = per_round[0]["modes"][mode]
        summary[mode] = {
            "spot_fraction": _fraction(mode, m, args),
            "round0_checked_per_node": first["checked_mean"], "round0_bytes_per_node": first["bytes_mean"],
            "round0_proof_bytes_per_node": first["proof_bytes_mean"],
            "signature_ms_per_node": _mean(x["signature_s"] for x in t) * 1e3,
            "standalone_ms_per_node": _mean(x["standalone_s"] for x in t) * 1e3,
            "fused_ms_per_node": _mean(x["fused_s"] for x in t) * 1e3,
            "proof_ms_per_node": _mean(x["proof_s"] for x in t) * 1e3,
            "rounds_until_all_banned": all_banned_round[mode],
            "expected_rounds_all_banned": expected_rounds_all_banned(m, cheaters, mode, args),
            "banned_pairs_at_end": last[mode]["banned_pairs"], "pairs": len(honest) * cheaters,
            "honest_banned_pairs": last[mode]["honest_banned_pairs"]}
    return {"m": m, "cheaters": cheaters, "honest": len(honest), "messages_per_round": m * args.group,
            "rounds_run": r, "honest_rejected": sum(x["honest_rejected"] for x in per_round),
            "honest_messages_checked_for_departures": sum(x["senders"] - cheaters for x in per_round) * args.group,
            "summary": summary, "per_round": per_round}


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _time_node(msgs, prompts, seed, logits, received, chosen, proofs, roster, context, model, params, eos, pad,
               SignatureVerifier, group_logits, replay_mismatch) -> dict:
    """One receiver's verification time this round: signatures of every message it ``received``, the
    content checks of those ``chosen``, standalone (forward over them, per sender, then the check) and
    fused (the check on logits already there), and re-checking the ``proofs`` others forwarded (standalone)."""
    sigs = SignatureVerifier(roster, context)  # (a fresh cache: every signature verified)
    t0 = time.perf_counter()
    for k in received:
        sigs.identify(msgs[k])
    sig_s = time.perf_counter() - t0

    def standalone(keys):
        by_sender: dict[int, list] = {}
        for k in keys:
            by_sender.setdefault(k[0], []).append(k)
        start = time.perf_counter()
        for s, ks in by_sender.items():
            with torch.no_grad():
                lg = group_logits(model, prompts[s], [list(msgs[k].token_ids) for k in ks], pad)
            for k, row in zip(ks, lg):
                replay_mismatch(row, list(msgs[k].token_ids), seed[k], params, eos)
        return time.perf_counter() - start

    standalone_s = standalone(chosen)
    t0 = time.perf_counter()
    for k in chosen:
        replay_mismatch(logits[k], list(msgs[k].token_ids), seed[k], params, eos)
    fused_s = time.perf_counter() - t0
    proof_s = standalone(proofs) if proofs else 0.0
    return {"received": len(received), "checked": len(chosen), "signature_s": sig_s,
            "standalone_s": standalone_s, "fused_s": fused_s, "proof_s": proof_s}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    ms = [x["m"] for x in runs]
    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    for mode in MODES:
        s = [x["summary"][mode] for x in runs]
        axes[0].plot(ms, [y["standalone_ms_per_node"] + y["proof_ms_per_node"] for y in s], "o-", label=mode)
        axes[1].plot(ms, [y["fused_ms_per_node"] for y in s], "o-", label=mode)
        axes[2].plot(ms, [(y["round0_bytes_per_node"] + y["round0_proof_bytes_per_node"]) / 1e3 for y in s], "o-", label=mode)
        line = axes[3].plot(ms, [y["rounds_until_all_banned"] or float("nan") for y in s], "o-", label=f"{mode} (measured)")[0]
        axes[3].plot(ms, [y["expected_rounds_all_banned"] or float("nan") for y in s], "x:", color=line.get_color(),
                     label=f"{mode} (closed form)")
    for a in axes[:2]:
        a.plot(ms, [x["summary"]["full"]["signature_ms_per_node"] for x in runs], "k--", label="signatures (every mode)")
    axes[0].set(yscale="log", ylabel="ms per node, round 0", title="standalone: forward + check (+ proofs re-checked)")
    axes[1].set(yscale="log", ylabel="ms per node, round 0", title="fused: the check on the update's logits")
    axes[2].set(yscale="log", ylabel="kB received per node, round 0", title="bytes per node per round (+ proofs)")
    axes[3].set(ylabel="rounds", title="rounds until every node banned every cheater")
    for a in axes:
        a.set(xscale="log", xlabel="nodes m")
        a.set_xticks(ms, [str(m) for m in ms])
        a.minorticks_off()
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 16, 64, 256])
    parser.add_argument("--malicious", type=float, default=0.25, help="share of cheating nodes")
    parser.add_argument("--poison", type=float, default=0.5, help="share of a cheater's messages it poisons")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--budget", type=int, default=16, help="budget_shared: messages a receiver checks a round")
    parser.add_argument("--ban-after", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--measure", type=int, default=2, help="honest receivers timed per round")
    parser.add_argument("--timed-rounds", type=int, default=2, help="rounds with every node's messages, timed (≥ 1)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--out", default="results/scale")
    parser.add_argument("--append", action="store_true", help="add these m to the runs already in --out/scale.json")
    args = parser.parse_args()
    if args.timed_rounds < 1:
        parser.error("--timed-rounds must be at least 1 (round 0 gives the cost per node)")
    torch.set_num_threads(args.threads)
    logging.getLogger("dgrpo").setLevel(logging.ERROR)
    sys.path.insert(0, str(ROOT))  # tests.conftest: the tiny model and tokenizer
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/scale.py " + " ".join(sys.argv[1:])
    report = {"commands": [command], "args": vars(args), "torch": torch.__version__, "runs": []}
    if args.append and (out / "scale.json").exists():
        report = json.loads((out / "scale.json").read_text())
        report["commands"].append(command)
    for m in args.nodes:
        start = time.perf_counter()
        result = run(m, args)
        result["wall_s"], result["command"] = round(time.perf_counter() - start, 1), command
        report["runs"] = sorted([x for x in report["runs"] if x["m"] != m] + [result], key=lambda x: x["m"])
        (out / "scale.json").write_text(json.dumps(report, indent=1) + "\n")  # after each m: what finished is kept
        plot(report, out / "scale.png")
    print(json.dumps([{"m": x["m"], **x["summary"]} for x in report["runs"]], indent=1))


if __name__ == "__main__":
    main()
