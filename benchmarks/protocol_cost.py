"""Cost of the swarm protocol (issue 13) against the time of a round.

    python benchmarks/protocol_cost.py --repeats 21 --out benchmarks/results/protocol_cost.json

One round of the README default swarm (4 nodes, B=4 prompts × G=8 completions: 32 messages) with
SmolLM2-135M-Instruct's tokenizer and real SmolLM2 completions (``results/readme_default/samples.jsonl``).
Timed, interleaved A/B per repeat (medians reported, the machine may be shared):

* ``sign``: the writers sign their 32 messages (Ed25519 over the canonical header);
* ``receive_plain`` / ``receive_protocol``: ``Swarm.receive`` of the 32 messages by one honest
  policy without and with the protocol (signature, seed binding, shares, length); their difference
  is what the protocol adds to the receive every honest policy runs;
* ``cross_check``: the distributed transport's equivocation check: the signed headers of 4 nodes'
  views (4 × 32 headers) built, encoded and verified.

The round time it is compared with is the median ``time/round`` of the committed README run
(``results/readme_default/metrics.jsonl``, the same swarm on this 2-core CPU). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--out", help="write the JSON result here")
    args = parser.parse_args()

    from dgrpo.policy.chat import encode_completion
    from dgrpo.policy.loading import DEFAULT_MODEL, load_policy
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams, completion_seed
    from dgrpo.swarm.identity import Roster, Signer, SignatureVerifier, generate_keys, run_context, signed_header
    from dgrpo.swarm.protocol import BanList, Protocol, ProtocolConfig, Schedule, equivocators
    from dgrpo.swarm.schedule import horizontal_prompts
    from dgrpo.swarm.swarm import Swarm
    from dgrpo.swarm.validation import Limits
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.types import Message

    nodes, B, G, seed, max_new = 4, 4, 8, 0, 256
    _, tokenizer = load_policy(DEFAULT_MODEL, "float32", trainable=False)
    task = ArithmeticTask(seed=0)
    policy = Policy("smollm2", None, tokenizer, SamplingParams(50, 1.0, max_new))
    texts = [json.loads(line)["completion"] for line in (ROOT / "results/readme_default/samples.jsonl").read_text().splitlines()]
    prompts = horizontal_prompts(task.train, B, seed, 0)
    share = G // nodes
    unsigned = []
    for k in range(nodes):
        for p in prompts:
            for i in range(k * share, (k + 1) * share):
                text = texts[len(unsigned) % len(texts)]
                ids = encode_completion(tokenizer, text)
                unsigned.append(Message(k, 0, p.prompt_id, i, text, tuple(ids), completion_seed(seed, 0, k, p.prompt_id, i),
                                        policy.tokenizer_id))
    keys = generate_keys(nodes)
    ctx = run_context("bench", "fp")
    signers = {n: Signer(n, key, ctx) for n, key in keys.items()}
    protocol = Protocol(ProtocolConfig(enforce_length=True), Schedule("horizontal", nodes, B, G, seed, task.train), max_new,
                        signers, SignatureVerifier(Roster.of(keys), ctx), BanList())
    plain = Swarm(task, {0: policy}, {}, {}, {}, {}, seed, G, Limits.for_completions(max_new))
    guarded = Swarm(task, {0: policy}, {}, {}, {}, {}, seed, G, Limits.for_completions(max_new), "horizontal", protocol)
    signed = [signers[m.node].sign(m) for m in unsigned]
    plain.receive(policy, unsigned, 0)  # warm the prompt cache of both
    assert len(guarded.receive(policy, signed, 0).rollouts) == len(signed)

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def cross_check():
        views = {n: json.dumps([[signed_header(m), m.signature] for m in signed]).encode() for n in range(nodes)}
        assert equivocators(views, protocol.verifier, 0) == {}

    runs = {"sign": [], "receive_plain": [], "receive_protocol": [], "cross_check": []}
    for _ in range(args.repeats):  # interleaved: A, B, A, B ...
        runs["receive_plain"].append(timed(lambda: plain.receive(policy, unsigned, 0)))
        runs["receive_protocol"].append(timed(lambda: guarded.receive(policy, signed, 0)))
        runs["sign"].append(timed(lambda: [signers[m.node].sign(m) for m in unsigned]))
        runs["cross_check"].append(timed(cross_check))
    med = {k: statistics.median(v) for k, v in runs.items()}
    rounds = [json.loads(line).get("time/round") for line in (ROOT / "results/readme_default/metrics.jsonl").read_text().splitlines()]
    round_s = statistics.median(r for r in rounds if r)
    added = med["sign"] + max(0.0, med["receive_protocol"] - med["receive_plain"])
    result = {"messages": len(signed), "completion_tokens": sum(len(m.token_ids) for m in signed),
              **{f"{k}_s": round(v, 5) for k, v in med.items()},
              "protocol_added_s": round(added, 5), "round_s": round_s,
              "added_fraction_inprocess": round(added / round_s, 6),
              "added_fraction_distributed": round((added + med["cross_check"]) / round_s, 6),
              "repeats": args.repeats}
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
