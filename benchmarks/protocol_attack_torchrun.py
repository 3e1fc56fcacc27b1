"""A rank that does not follow the protocol, in a real 4-process torchrun swarm (issue 13).

    bash benchmarks/protocol_attack_torchrun.sh results/protocol_torchrun   # the three runs and the summary

or by hand, one run at a time, then the summary:

    torchrun --standalone --nproc-per-node 4 benchmarks/protocol_attack_torchrun.py --rank3 attack -- \\
        swarm.transport=distributed swarm.protocol.schedule=relative swarm.nodes=4 swarm.unsafe_key_exchange=true \\
        rounds=3 out_dir=OUT name=attacked ...   (relative: the schedule the .sh measured; unset it is the clock)
    python benchmarks/protocol_attack_torchrun.py --summarise OUT

Each rank runs ``dgrpo run`` with the overrides after ``--``. Rank 3 (node 3, holding only its own
private key) plays one of three parts:

* ``honest`` (run ``unattacked``): it follows the protocol.
* ``attack`` (run ``attacked``): every round it replaces two of its slots and adds messages:
  seed grinding (its first slot sampled from a seed it chose, the longest of 4, claiming that seed),
  an over-long completion (its second slot, 2 × max_new_tokens tokens), forgery (its message
  re-addressed to node 0's slot and signed with its own key; one claiming node 1, unsigned), flooding
  (indices 999 and -5, a prompt not of the round) and, from round 1, a replay of a message of its
  previous round and forged frames appended under node 1's store key before node 1 posts (what only a
  real store lets a rank do). In the last round it also signs a second, different completion for one
  of its slots: that is equivocation, and every honest node drops all of node 3's messages of the round.
* ``withhold`` (run ``withheld``): the reference: it sends its honest share without what the attacker
  replaced (its first two slots) and nothing in the last round.

A refused message must have no effect but its absence, so the honest nodes' metrics of ``attacked``
must equal ``withheld``'s (and differ from ``unattacked`` only by node 3's missing slots). The summary
(``summary.json``) reads node 0's ``peers.jsonl`` (the main rank logs), checks that every attempt was
refused and attributed to node 3 (or ``unsigned``), that node 3 got exactly the withheld run's
completions accepted, and that the honest metrics equal the withheld run's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol_attack_run import ATTACKER, ground_sample, overlong  # noqa: E402

VICTIM_KEY = 1  # whose store key rank 3 writes under (not node 0's: the main rank never reads its own key)


def _signed_variant(swarm, msg, text: str, **changes):
    from dgrpo.policy.chat import encode_completion

    policy = swarm.policies[ATTACKER]
    ids = tuple(encode_completion(policy.tokenizer, text))
    return swarm.protocol.signers[ATTACKER].sign(dataclasses.replace(msg, text=text, token_ids=ids, **changes))


def attack_round(swarm, mine, round_idx: int, last_round: int, previous: dict) -> tuple[list, list, list[str]]:
    """(messages to send, messages to replay inside the payload, the attempts' kinds) for node 3."""
    from dgrpo.policy.sampling import completion_seed

    sign = swarm.protocol.signers[ATTACKER].sign
    first, second = mine[0], mine[1]
    ids, text, chosen = ground_sample(swarm, first, round_idx)
    long_ids, long_text = overlong(swarm)
    other = next(p for p in swarm.task.train if p.prompt_id not in {m.prompt_id for m in mine})
    seed_of = lambda prompt_id, index: completion_seed(swarm.run_seed, round_idx, ATTACKER, prompt_id, index)  # noqa: E731
    tried = [
        ("seed grinding", sign(dataclasses.replace(first, text=text, token_ids=ids, seed=chosen))),
        ("over-long", sign(dataclasses.replace(second, text=long_text, token_ids=long_ids))),
        ("forgery", sign(dataclasses.replace(first, node=0, index=0, seed=completion_seed(swarm.run_seed, round_idx, 0, first.prompt_id, 0)))),
        ("forgery", dataclasses.replace(first, node=1, index=2, signature=None)),
        ("flooding", sign(dataclasses.replace(mine[2], index=999, seed=seed_of(mine[2].prompt_id, 999)))),
        ("flooding", sign(dataclasses.replace(mine[2], index=-5, seed=seed_of(mine[2].prompt_id, -5)))),
        ("flooding", sign(dataclasses.replace(mine[2], prompt_id=other.prompt_id, seed=seed_of(other.prompt_id, mine[2].index)))),
    ]
    if round_idx == last_round:
        tried.append(("equivocation", _signed_variant(swarm, mine[2], mine[2].text + " ok")))
    replays = [previous["last"]] if "last" in previous else []
    previous["last"] = mine[2]
    kinds = [k for k, _ in tried] + ["replay"] * len(replays)
    return [m for _, m in tried[:2]] + mine[2:] + [m for _, m in tried[2:]], replays, kinds


def play(part: str, run_dir: Path, last_round: int) -> None:
    """Patch this rank's swarm and transport for ``part`` (attack or withhold); log attempts at exit."""
    import atexit

    from dgrpo.swarm.swarm import Swarm
    from dgrpo.swarm.validation import parse_message
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.framing import frame

    tried: list[dict] = []
    previous: dict = {}
    state: dict = {"replays": [], "swarm": None}
    original_write, original_exchange = Swarm.write, DistributedTransport.exchange

    def write(self, slots, round_idx):
        out = original_write(self, slots, round_idx)
        mine = out[ATTACKER]
        state["swarm"] = self
        if part == "withhold":
            out[ATTACKER] = [] if round_idx == last_round else mine[2:]
            return out
        out[ATTACKER], state["replays"], kinds = attack_round(self, mine, round_idx, last_round, previous)
        tried.append({"round": round_idx, "attempts": kinds})
        return out

    def exchange(self, tag, payload, framed=False):
        # Round r's exchange: before posting it, append forged frames of round r+1 under node 1's
        # key. Node 1 cannot post r+1 before this rank posted r, so every reader of r+1 sees them.
        if part == "attack" and tag.startswith("r") and tag[1:].isdigit() and state["swarm"] is not None:
            nxt = int(tag[1:]) + 1
            sign = state["swarm"].protocol.signers[ATTACKER].sign
            data = json.loads(payload)
            forged = [sign(dataclasses.replace(parse_message(m)[0], node=VICTIM_KEY, round=nxt)) for m in data["messages"][2:4]]
            body = frame(json.dumps({"messages": [m.to_dict() for m in forged], "labels": ["honest"] * len(forged)}).encode())
            self.store.append(f"r{nxt}/data/{VICTIM_KEY}", body)
            tried.append({"round": nxt, "attempts": ["forgery (store key of node 1)"] * len(forged)})
            if state["replays"]:  # (the transport refuses to send two rounds' messages: into the payload)
                data["messages"] += [m.to_dict() for m in state["replays"]]
                data["labels"] += ["honest"] * len(state["replays"])
                payload = json.dumps(data).encode()
        return original_exchange(self, tag, payload, framed)

    def dump() -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "attempts_node3.json").write_text(json.dumps(tried, indent=1) + "\n")

    Swarm.write, DistributedTransport.exchange = write, exchange
    atexit.register(dump)


def summarise(out: Path, rounds: int) -> dict:
    """Compare ``out/attacked`` with ``out/withheld`` and ``out/unattacked``; write ``summary.json``."""
    from dgrpo.metrics.logger import read_metrics

    tried = json.loads((out / "attacked" / "attempts_node3.json").read_text())
    per_round = {r: [] for r in range(rounds)}
    for t in tried:
        if t["round"] < rounds:
            per_round[t["round"]] += t["attempts"]

    def peers(name):
        return [json.loads(x)["peers"] for x in (out / name / "peers.jsonl").read_text().splitlines()]

    def count(p, who, field):
        return sum(p.get(who, {}).get(field, {}).values())

    counters = ("swarm/messages", "swarm/invalid", "swarm/invalid_transport")
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/") and k not in counters} for r in rs]  # noqa: E731
    runs = {name: strip(read_metrics(out / name)) for name in ("unattacked", "withheld", "attacked")}
    rows = []
    for r, (a, w, u) in enumerate(zip(peers("attacked"), peers("withheld"), peers("unattacked"))):
        who = str(ATTACKER)
        # (minus what the withheld reference refused of node 3's own honest messages: a tiny random
        # model can sample a special token; SmolLM2 does not)
        refused = count(a, who, "rejected") + count(a, "unsigned", "rejected") - count(w, who, "rejected")
        row = {"round": r, "attempts": len(per_round[r]), "kinds": sorted(set(per_round[r])),
               "refused_node3": a.get(who, {}).get("rejected", {}), "refused_unsigned": a.get("unsigned", {}).get("rejected", {}),
               "transport_node3": a.get(who, {}).get("transport", {}),
               "accepted_node3": {"attacked": a.get(who, {}).get("accepted", 0), "withheld": w.get(who, {}).get("accepted", 0),
                                  "unattacked": u.get(who, {}).get("accepted", 0)},
               "refused_other_senders": {n: v["rejected"] for n, v in a.items() if n not in (who, "unsigned") and v.get("rejected")},
               "refused_other_senders_withheld": {n: v["rejected"] for n, v in w.items() if n not in (who, "unsigned") and v.get("rejected")}}
        equivocated = "equivocation" in row["transport_node3"]
        # every attempt is one refusal, except that equivocation drops all node 3's messages at the transport
        row["every_attempt_refused"] = ((refused == row["attempts"] or (equivocated and refused > 0))
                                        and row["accepted_node3"]["attacked"] == row["accepted_node3"]["withheld"]
                                        and row["refused_other_senders"] == row["refused_other_senders_withheld"])
        rows.append(row)

    def diff(x, y):
        return [{k: (p.get(k), q.get(k)) for k in sorted(set(p) | set(q)) if p.get(k) != q.get(k)} for p, q in zip(x, y)]

    summary = {"honest_metrics_equal_withheld": runs["attacked"] == runs["withheld"],
               "every_attempt_refused": all(r["every_attempt_refused"] for r in rows),
               "differences_attacked_vs_withheld": diff(runs["withheld"], runs["attacked"]),
               "keys_differing_withheld_vs_unattacked": sorted({k for d in diff(runs["unattacked"], runs["withheld"]) for k in d}),
               "per_round": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank3", choices=["honest", "attack", "withhold"], default="honest", help="what rank 3 does")
    parser.add_argument("--summarise", metavar="OUT", help="compare the three runs under OUT and stop")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the runs (the last has the equivocation)")
    parser.add_argument("overrides", nargs="*", help="dgrpo run overrides (after --)")
    args = parser.parse_args()
    if args.summarise:
        summary = summarise(Path(args.summarise), args.rounds)
        print(json.dumps({k: summary[k] for k in ("honest_metrics_equal_withheld", "every_attempt_refused")}))
        return 0 if summary["honest_metrics_equal_withheld"] and summary["every_attempt_refused"] else 1
    if args.rank3 != "honest" and int(os.environ.get("RANK", "0")) == ATTACKER:
        get = lambda key: next(a.split("=", 1)[1] for a in args.overrides if a.startswith(key + "="))  # noqa: E731
        play(args.rank3, Path(get("out_dir")) / get("name"), int(get("rounds")) - 1)
    from dgrpo.cli import main as dgrpo

    return dgrpo(["run", *args.overrides])


if __name__ == "__main__":
    sys.exit(main())
