#!/bin/bash
# Dev stage of split v2 (README "Plan"): 20 then 40 evenly spaced rows of each tuned set under each candidate prompt
# (supersets: nothing judged twice), until DEADLINE (UTC, e.g. 14:45). Run from the repository root:
#   nice -n 10 bash results/judge_qwen_v2/dev.sh 14:45
set -u
DEADLINE=$(date -u -d "$1" +%s)
S=results/judge_qwen_v2/scores.jsonl; G=${GSM8K:-/work/shared/data/gsm8k/test.jsonl}
export THREADS=${THREADS:-1} PORT=${PORT:-8057}
for N in 20 40; do for P in plain relevant; do
  [ $(( DEADLINE - $(date -u +%s) )) -gt 30 ] || exit 0
  bash benchmarks/judge_table1/serve_and_score.sh qwen2.5-coder-1.5b-instruct --out $S --split dev --split-version v2 \
    --per-set $N --prompt $P --tag q15v2-$P --gsm8k $G --stop-at $DEADLINE \
    --sets hail equation honest_sampled honest_oracle honest_gsm8k honest_python
done; done
