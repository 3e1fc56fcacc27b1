#!/bin/bash
# Issue 37 must-have 3, continued: the 12-round Fig. 5 runs of fig5.sh resumed to 30 rounds (undefended showed ASR 0 at
# r12: the payload had not spread yet), then the honest reference and the checker + detector run. Resumable: rerun it.
echo ${AUTOGROUP_NICE:-19} > /proc/self/autogroup 2>/dev/null; echo 1000 > /proc/self/oom_score_adj
R=/work/evidence/repo37f; cd $R && . /work/main/.venv/bin/activate && export PYTHONPATH=$R/src
OUT=/work/evidence/run37/fig5; PORT=${PORT:-8065}; CFG=configs/heterogeneous_qwen_smollm2_hail.yaml; N=${ROUNDS:-30}
done_run() { [ -f $OUT/$1/metrics.jsonl ] && python -c "
import json,sys; rows=[json.loads(l) for l in open('$OUT/$1/metrics.jsonl') if l.strip()]
sys.exit(0 if any(r.get('round')==$N and 'eval/accuracy' in r for r in rows) else 1)"; }
resume() {  # name: resume its checkpoint to N rounds
  if done_run $1; then echo "$1 finished at $N"; return; fi
  OMP_NUM_THREADS=1 nice -n 19 python -m dgrpo resume $OUT/$1 rounds=$N >> $OUT/$1.log 2>&1
  echo "$1 rc=$? $(date -u +%H:%M)"
}
resume none
if ! done_run judge_v4; then
  GGUF=$(python -c "from dgrpo.policy.loading import packaged_gguf; print(packaged_gguf('qwen2.5-coder-1.5b-instruct'))")
  python benchmarks/judge_table1/llama_server.py --model "$GGUF" --model_alias qwen2.5-coder-1.5b-instruct --host 127.0.0.1 \
    --port $PORT --n_threads 1 --n_threads_batch 1 --n_ctx 4096 --seed 0 > $OUT/serve_$PORT.log 2>&1 &
  SERVER=$!; trap 'kill $SERVER 2>/dev/null' EXIT
  for i in $(seq 180); do curl -s 127.0.0.1:$PORT/v1/models > /dev/null && break; sleep 1; done
  resume judge_v4
  kill $SERVER 2>/dev/null
fi
