#!/usr/bin/env bash
# Issue 13's committed run: a real 4-process torchrun swarm of SmolLM2-135M-Instruct, 3 rounds, three times:
# unattacked, with rank 3 trying forgery, seed grinding, flooding, an over-long completion, replay and
# equivocation, and the reference where rank 3 withholds what the attacker replaced
# (benchmarks/protocol_attack_torchrun.py); then the summary. Needs ~6 GB per rank: run it alone.
#   bash benchmarks/protocol_attack_torchrun.sh [OUT] [extra overrides...]
set -euo pipefail
OUT=${1:-results/protocol_torchrun}; shift || true
HERE=$(dirname "$0")
# swarm.protocol.schedule=relative: the schedule the committed run was measured on (the default is the clocked one since
# task h31d, docs/distributed.md "Clocked rounds"; pass swarm.protocol.schedule=clock swarm.protocol.round_s=auto for it)
COMMON=(swarm.transport=distributed swarm.protocol.schedule=relative swarm.nodes=4 swarm.unsafe_key_exchange=true rounds=3
        threads=1 eval.every=3 eval.n_prompts=8 "out_dir=$OUT" "$@")
mkdir -p "$OUT"
for RUN in unattacked:honest attacked:attack withheld:withhold; do
    NAME=${RUN%%:*}; PART=${RUN##*:}
    /usr/bin/time -v torchrun --standalone --nproc-per-node 4 "$HERE/protocol_attack_torchrun.py" --rank3 "$PART" -- \
        "${COMMON[@]}" "name=$NAME" > "$OUT/$NAME.log" 2>&1
done
python "$HERE/protocol_attack_torchrun.py" --summarise "$OUT" --rounds 3
