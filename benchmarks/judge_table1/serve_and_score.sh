#!/bin/bash
# Serve a packaged Qwen2.5-Coder judge with llama.cpp's OpenAI-compatible server (llama-cpp-python[server],
# the GGUF file dgrpo assembled and verified), score rows with it, stop the server.
# usage: bash benchmarks/judge_table1/serve_and_score.sh MODEL [score.py options]
#   MODEL: qwen2.5-coder-0.5b-instruct | qwen2.5-coder-1.5b-instruct; THREADS (default 1), PORT (default 8012)
set -e
MODEL=$1; shift
PORT=${PORT:-8012}
THREADS=${THREADS:-1}
GGUF=$(python -c "from dgrpo.policy.loading import packaged_gguf; print(packaged_gguf('$MODEL'))")
LOG=${SERVE_LOG:-/tmp/judge_serve_$PORT.log}
python benchmarks/judge_table1/llama_server.py --model "$GGUF" --model_alias "$MODEL" --host 127.0.0.1 --port "$PORT" \
  --n_threads "$THREADS" --n_threads_batch "$THREADS" --n_ctx 4096 --seed 0 > "$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for i in $(seq 120); do curl -s "127.0.0.1:$PORT/v1/models" > /dev/null && break; sleep 1; done
python benchmarks/judge_table1/score.py --url "http://127.0.0.1:$PORT/v1" --model "$MODEL" "$@"
