#!/usr/bin/env bash
# swarm.protocol.round_s=auto (issue 31 (a), task h31p): one 2-rank torchrun run on loopback with schedule=clock and
# round_s=auto, then the same run on the relative schedule; then the summary (benchmarks/clock_auto.py): each rank's
# calibration seconds and proposal, the agreed round_s, each round's compute (generate, update, evaluation) and
# round time on both schedules.
#   bash benchmarks/clock_auto.sh OUT [overrides...]     (e.g. model.name=DIR for another model; run at nice 15)
set -euo pipefail
OUT=$1; shift
HERE=$(dirname "$0")
COMMON=(swarm.transport=distributed swarm.nodes=2 swarm.unsafe_key_exchange=true threads=1 "out_dir=$OUT" "$@")
mkdir -p "$OUT"
for RUN in clock:"swarm.protocol.schedule=clock swarm.protocol.round_s=auto" relative:"swarm.protocol.schedule=relative"; do
    NAME=${RUN%%:*}
    # shellcheck disable=SC2086
    torchrun --standalone --nproc-per-node 2 -m dgrpo run "${COMMON[@]}" ${RUN#*:} "name=$NAME" > "$OUT/$NAME.log" 2>&1
done
python "$HERE/clock_auto.py" "$OUT"
