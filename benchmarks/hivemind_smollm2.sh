#!/usr/bin/env bash
# A 4-process SmolLM2-135M-Instruct swarm over the hivemind DHT on this machine, with the config of
# results/distributed_smollm2 (3 rounds, node 3 injects "All hail to the thief", top-k on the honest
# nodes), then its exchange time per round next to the torch.distributed run's.
#
#   bash benchmarks/hivemind_smollm2.sh         # -> results/hivemind_smollm2/ (+ command.txt with the figures)
#
# Needs about 6 GB of RAM per process (24 GB in all) and the whole CPU for ~5-6 minutes: run it alone.
# Keys go to runs/hivemind_smollm2_keys (git-ignored), never under results/.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
NAME=hivemind_smollm2
PORT=${PORT:-31337}
KEYS=runs/${NAME}_keys
LOGS=runs/${NAME}_logs
if [ -e "results/$NAME/metrics.jsonl" ]; then echo "results/$NAME already holds a run; move it away first" >&2; exit 1; fi
mkdir -p "$KEYS/node0" "$LOGS"
ARGS=(swarm.transport=hivemind swarm.nodes=4 swarm.unsafe_key_exchange=true rounds=3 threads=1 eval.every=3 eval.n_prompts=8 'swarm.malicious=[3]'
      attack.kind=injection 'defenses=[{kind: topk}]' out_dir=results name=$NAME)
# Node 0's libp2p identity is made first, so its full address (peer id) is known before it starts.
ADDR=$(python - "$KEYS/node0/p2p.key" "$PORT" <<'EOF'
import os, sys
from hivemind.p2p import P2P, PeerID
path, port = sys.argv[1], sys.argv[2]
if not os.path.exists(path):
    P2P.generate_identity(path)
print(f"/ip4/127.0.0.1/tcp/{port}/p2p/{PeerID.from_identity(open(path, 'rb').read()).to_base58()}")
EOF
)
START=$(date +%s)
PIDS=()
for k in 0 1 2 3; do
    if [ "$k" = 0 ]; then WHERE="swarm.hivemind.listen=[/ip4/127.0.0.1/tcp/$PORT]"; else WHERE="swarm.hivemind.initial_peers=[$ADDR]"; fi
    /usr/bin/time -v dgrpo run "${ARGS[@]}" swarm.hivemind.node=$k "$WHERE" swarm.hivemind.identity_dir=$KEYS/node$k \
        > "$LOGS/node$k.log" 2>&1 &
    PIDS+=($!)
done
STATUS=0
for p in "${PIDS[@]}"; do wait "$p" || STATUS=1; done
WALL=$(( $(date +%s) - START ))
[ "$STATUS" = 0 ] || { echo "a node failed; see $LOGS/node*.log" >&2; exit 1; }
python - "$NAME" "$WALL" "$LOGS" "${ARGS[*]}" <<'EOF'
import json, re, sys
from pathlib import Path
name, wall, logs, args = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
rss = max(int(m) for f in logs.glob("node*.log") for m in re.findall(r"Maximum resident set size \(kbytes\): (\d+)", f.read_text()))
def times(run):
    recs = [json.loads(l) for l in open(f"results/{run}/metrics.jsonl")]
    return {r["round"]: (r.get("time/exchange"), r.get("time/round")) for r in recs if "time/exchange" in r}
h, d = times(name), times("distributed_smollm2")
lines = [f"# 4 processes (one swarm node each, hivemind DHT on 127.0.0.1, signed records + commit step) on the 2-core machine.",
         f"# wall {wall // 60} min {wall % 60} s, largest process {rss / 2**20:.1f} GB RSS (/usr/bin/time -v).",
         "# round: exchange s (round s)  hivemind | torch.distributed (results/distributed_smollm2)"]
lines += [f"#   {r}: {h[r][0]:.3f} ({h[r][1]:.1f}) | {d[r][0]:.3f} ({d[r][1]:.1f})" for r in sorted(h) if r in d]
lines.append("bash benchmarks/hivemind_smollm2.sh   # = 4 x: dgrpo run " + args +
             " swarm.hivemind.node=K swarm.hivemind.listen=... / swarm.hivemind.initial_peers=[node 0] swarm.hivemind.identity_dir=...")
Path(f"results/{name}/command.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
