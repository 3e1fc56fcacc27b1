#!/bin/bash
# Issue 37 must-have 3: Fig. 5 (hail, horizontal) in the SmolLM2 + Qwen2.5-Coder-0.5B swarm, from the clone
# /work/evidence/repo37f. Runs in order, each resumable (checkpoint every round; rerun this script to resume):
#   judge_v4: the frozen v4 rule (step checker excuse_answer, or the 1.5B step judge behind llama.cpp on PORT)
#   none:     undefended
#   checker_detector: the step checker + the trained LoRA detector (results/heterogeneous_fig5's pair)
echo ${AUTOGROUP_NICE:-19} > /proc/self/autogroup 2>/dev/null; echo 1000 > /proc/self/oom_score_adj
R=/work/evidence/repo37f; cd $R && . /work/main/.venv/bin/activate && export PYTHONPATH=$R/src
. /work/evidence/run37/judge_server.sh; OUT=/work/evidence/run37/fig5; PORT=${PORT:-8065}; CFG=configs/heterogeneous_qwen_smollm2_hail.yaml
JUDGE="defenses=[{kind: step_checker, excuse_answer: true, action: zero}, {kind: judge, backend: openai, base_url: 'http://127.0.0.1:$PORT/v1', model: qwen2.5-coder-1.5b-instruct, granularity: step, prompt: step, max_steps: 8, max_new_tokens: 1, threshold: 0.4672898903456494, temperature: 0.0, on_error: reject, max_concurrency: 1, timeout_s: 300, action: zero}]"
DET="defenses=[{kind: step_checker, action: zero}, {kind: judge, backend: detector, path: /work/evidence/run37/detector_smollm2, threshold: 0.5, action: zero}]"
done_run() { [ -f $OUT/$1/metrics.jsonl ] && python -c "
import json,sys; rows=[json.loads(l) for l in open('$OUT/$1/metrics.jsonl') if l.strip()]
sys.exit(0 if any(r.get('round')==12 and 'eval/accuracy' in json.dumps(r) for r in rows) else 1)"; }
run() {  # name, extra overrides...
  local name=$1; shift
  if done_run $name; then echo "$name finished"; return; fi
  if ls $OUT/$name/checkpoint 2>/dev/null | grep -q .; then
    OMP_NUM_THREADS=1 nice -n 19 python -m dgrpo resume $OUT/$name >> $OUT/$name.log 2>&1
  else
    OMP_NUM_THREADS=1 nice -n 19 python -m dgrpo run --config $CFG checkpoint_every=1 out_dir=$OUT name=$name "$@" >> $OUT/$name.log 2>&1
  fi
  echo "$name rc=$? $(date -u +%H:%M)"
}
if ! done_run judge_v4; then
  with_judge_server run judge_v4 "$JUDGE"
fi
run none
run honest 'attack={kind: none}' 'swarm.malicious=[]'   # the benefit's reference: node 3 honest, nothing attacked
if [ ! -f /work/evidence/run37/detector_smollm2/detector.json ]; then
  H=results/heterogeneous_table1_v2
  python - <<'PY'
rows = open("results/heterogeneous_table1_v2/detector_train_honest.jsonl").readlines()
open("/work/evidence/run37/detector_train_honest500.jsonl", "w").writelines(rows[::2])
PY
  OMP_NUM_THREADS=1 nice -n 19 python -m dgrpo detector train --data $H/detector_train.jsonl \
    --data /work/evidence/run37/detector_train_honest500.jsonl --out /work/evidence/run37/detector_smollm2 \
    --set epochs=1 --set max_length=256 > $OUT/detector_train.log 2>&1
fi
run checker_detector "$DET"
