# Sourced by fig5.sh and fig5_30.sh: with_judge_server CMD... runs CMD while the frozen v4 judge (Qwen2.5-Coder-1.5B,
# the packaged GGUF, llama.cpp's OpenAI-compatible server, one thread) answers on $PORT; its log: $OUT/serve_$PORT.log.
with_judge_server() {
  local gguf server
  gguf=$(python -c "from dgrpo.policy.loading import packaged_gguf; print(packaged_gguf('qwen2.5-coder-1.5b-instruct'))")
  python benchmarks/judge_table1/llama_server.py --model "$gguf" --model_alias qwen2.5-coder-1.5b-instruct --host 127.0.0.1 \
    --port $PORT --n_threads 1 --n_threads_batch 1 --n_ctx 4096 --seed 0 > $OUT/serve_$PORT.log 2>&1 &
  server=$!; trap "kill $server 2>/dev/null" EXIT
  for i in $(seq 180); do curl -s 127.0.0.1:$PORT/v1/models > /dev/null && break; sleep 1; done
  "$@"
  kill $server 2>/dev/null
}
