"""A node that does not follow the protocol, in an in-process SmolLM2 swarm (issue 13).

    python benchmarks/protocol_attack_run.py --rounds 3 --out results/protocol_inprocess

Two runs of the same swarm and seed (SmolLM2-135M-Instruct, 4 nodes, 4 prompts × 8 completions,
``swarm.protocol.enforce_length=true``): ``unattacked``, and ``attacked``, where node 3 sends its
honest share and, every round, beside it:

* forgery: its first message re-addressed to node 0 and signed with its own key; one claiming node 1
  with no signature; one of node 0's messages with its text changed (node 0's signature kept);
* seed grinding: a genuine sample of its first slot from another seed (the best of 4 by length),
  claiming that seed;
* flooding: a second message for its first slot, indices 999 and -5, a prompt not of the round;
* an over-long completion (2 × max_new_tokens tokens);
* replay: its first message of the previous round.

Every extra message must be refused and attributed to node 3 (or to "unsigned"), and the honest
nodes' metrics must be the unattacked run's. Writes both run directories and ``summary.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

ATTACKER = 3


def ground_sample(swarm, msg, round_idx: int) -> tuple[tuple, str, int]:
    """Seed grinding: (ids, text, seed) of the longest of 4 genuine samples of ``msg``'s slot from seeds
    next to the one the protocol binds."""
    from dgrpo.policy.sampling import completion_seed

    bound = completion_seed(swarm.run_seed, round_idx, ATTACKER, msg.prompt_id, msg.index)
    ground = list(range(bound + 1, bound + 5))
    samples = swarm.policies[ATTACKER].generate(swarm.task, [swarm.problems[msg.prompt_id]] * len(ground), ground)
    (ids, text), chosen = max(zip(samples, ground), key=lambda x: len(x[0][0]))
    return tuple(ids), text, chosen


def overlong(swarm) -> tuple[tuple, str]:
    """(ids, text) of a completion of 2 × max_new_tokens tokens."""
    from dgrpo.policy.chat import decode_completion, encode_completion

    tokenizer = swarm.policies[ATTACKER].tokenizer
    ids = encode_completion(tokenizer, " ".join(["check"] * (2 * swarm.protocol.max_new_tokens)))
    return tuple(ids), decode_completion(tokenizer, ids)


def attempts(swarm, mine, round_idx, previous: dict, tamper=None) -> list:
    """(kind, message) of every protocol attack node 3 tries beside its honest share ``mine`` this round.

    ``tamper``: an honest peer's message to re-send with changed text and its signature kept (in
    process the attacker sees node 0's message being written; a distributed rank does not).
    ``previous`` carries the last round's first message (the replay) between calls.
    """
    from dgrpo.policy.chat import encode_completion
    from dgrpo.policy.sampling import completion_seed

    sign = swarm.protocol.signers[ATTACKER].sign
    first, policy = mine[0], swarm.policies[ATTACKER]
    ids, text, chosen = ground_sample(swarm, first, round_idx)
    long_ids, long_text = overlong(swarm)
    other = next(p for p in swarm.task.train if p.prompt_id not in {m.prompt_id for m in mine})
    seed_of = lambda prompt_id, index: completion_seed(swarm.run_seed, round_idx, ATTACKER, prompt_id, index)  # noqa: E731
    extra = [
        ("forgery", sign(dataclasses.replace(first, node=0))),
        ("forgery", dataclasses.replace(first, node=1, signature=None)),
        ("seed grinding", sign(dataclasses.replace(first, text=text, token_ids=ids, seed=chosen))),
        ("flooding", sign(dataclasses.replace(first, text=first.text + " ok",
                                              token_ids=tuple(encode_completion(policy.tokenizer, first.text + " ok"))))),
        ("flooding", sign(dataclasses.replace(first, index=999, seed=seed_of(first.prompt_id, 999)))),
        ("flooding", sign(dataclasses.replace(first, index=-5, seed=seed_of(first.prompt_id, -5)))),
        ("flooding", sign(dataclasses.replace(first, prompt_id=other.prompt_id, seed=seed_of(other.prompt_id, first.index)))),
        ("over-long", sign(dataclasses.replace(first, text=long_text, token_ids=long_ids))),
    ]
    if tamper is not None:
        extra.insert(2, ("forgery", dataclasses.replace(tamper, text=tamper.text + " All hail to the thief.")))
    if "last" in previous:
        extra.append(("replay", previous["last"]))
    previous["last"] = first
    return extra


def attacker_write(original):
    """Swarm.write with node 3's protocol attacks added to what it honestly writes."""
    previous: dict = {}

    def write(self, slots, round_idx):
        out = original(self, slots, round_idx)
        extra = attempts(self, out[ATTACKER], round_idx, previous, tamper=out[0][0])
        previous.setdefault("attempts", []).append({"round": round_idx, "attempts": [k for k, _ in extra]})
        out[ATTACKER] = [*out[ATTACKER], *(m for _, m in extra)]
        return out

    write.previous = previous
    return write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="results/protocol_inprocess")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override for both runs")
    args = parser.parse_args()

    from dgrpo.cli import main as dgrpo
    from dgrpo.metrics.logger import read_metrics
    from dgrpo.swarm.swarm import Swarm

    out = Path(args.out)
    base = ["run", f"rounds={args.rounds}", "swarm.nodes=4", "eval.every=3", "eval.n_prompts=8", f"threads={args.threads}",
            "swarm.protocol.enforce_length=true", f"out_dir={out}", *args.set]
    assert dgrpo([*base, "name=unattacked"]) == 0
    original = Swarm.write
    Swarm.write = attacker_write(original)
    try:
        assert dgrpo([*base, "name=attacked"]) == 0
    finally:
        attempts = Swarm.write.previous.get("attempts", [])
        Swarm.write = original
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/") and k not in ("swarm/messages", "swarm/invalid")}  # noqa: E731
                        for r in rs]
    clean, attacked = read_metrics(out / "unattacked"), read_metrics(out / "attacked")
    def peers(name):
        return [json.loads(x)["peers"] for x in (out / name / "peers.jsonl").read_text().splitlines()]

    def refused(p):
        return sum(p.get(str(ATTACKER), {}).get("rejected", {}).values()) + sum(p.get("unsigned", {}).get("rejected", {}).values())

    rows = []
    for a, c, tried, m in zip(peers("attacked"), peers("unattacked"), attempts, attacked):
        rows.append({"round": tried["round"], "attempts": len(tried["attempts"]),
                     "refused_node3": a[str(ATTACKER)]["rejected"], "refused_unsigned": a.get("unsigned", {}).get("rejected", {}),
                     "refused_node3_unattacked": c[str(ATTACKER)]["rejected"],
                     "accepted_node3": a[str(ATTACKER)]["accepted"], "accepted_node3_unattacked": c[str(ATTACKER)]["accepted"],
                     "swarm_invalid": m.get("swarm/invalid")})
        rows[-1]["every_attempt_refused"] = (refused(a) - refused(c) == len(tried["attempts"])
                                             and rows[-1]["accepted_node3"] == rows[-1]["accepted_node3_unattacked"])
    summary = {"honest_metrics_equal": strip(clean) == strip(attacked), "attempts": attempts, "per_round": rows,
               "every_attempt_refused": all(r["every_attempt_refused"] for r in rows)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
