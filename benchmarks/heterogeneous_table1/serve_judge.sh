#!/bin/bash
# The openai judge row: SmolLM2-135M-Instruct behind `transformers serve` (one thread: with the default
# thread count on this shared 2-core machine one judgment took 8 s instead of 0.35 s), then table.py.
# usage: bash benchmarks/heterogeneous_table1/serve_judge.sh DATA_DIR [table.py options]
set -e
DATA=$1; shift
M=${JUDGE_MODEL:-$HOME/.cache/dgrpo/smollm2-135m-instruct-f32}
PORT=${PORT:-8011}
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 transformers serve "$M" --port $PORT > "$DATA/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for i in $(seq 120); do curl -s localhost:$PORT/v1/models > /dev/null && break; sleep 2; done
python benchmarks/heterogeneous_table1/table.py --data "$DATA" --detectors openai_judge \
  --url http://127.0.0.1:$PORT/v1 --served-model "$M" --served-tokenizer "$M" "$@"
