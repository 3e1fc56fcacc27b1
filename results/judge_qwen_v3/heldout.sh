#!/bin/bash
# Held out of split v2 with the frozen step rule (rule_$TAG.json committed first), stages of 25 evenly spaced rows per
# set (then 50, 100: supersets, nothing judged twice), every stage stopping at DEADLINE (UTC), then the tables.
#   nice -n 10 bash results/judge_qwen_v3/heldout.sh q15v3-step 23:25
set -u
TAG=$1; P=step; [ "$TAG" = q15v3-stepkind ] && P=step-kind; DEADLINE=$(date -u -d "$2" +%s)
R=results/judge_qwen_v3; S=$R/scores.jsonl; G=${GSM8K:-/work/shared/data/gsm8k/test.jsonl}; B=benchmarks/judge_table1
export THREADS=${THREADS:-1} PORT=${PORT:-8063}
[ -f $R/rule_$TAG.json ] && git ls-files --error-unmatch $R/rule_$TAG.json > /dev/null || { echo "rule_$TAG.json not committed"; exit 1; }
SETS="hail equation honest_sampled honest_oracle honest_gsm8k honest_python gleeb code master_key judge_bait"
for N in 25 50 100; do
  [ $(( DEADLINE - $(date -u +%s) )) -gt 30 ] || break
  bash $B/serve_and_score.sh qwen2.5-coder-1.5b-instruct --out $S --split heldout --split-version v2 --gsm8k $G \
    --stop-at $DEADLINE --granularity step --max-steps 8 --per-set $N --prompt $P --tag $TAG --sets $SETS
done
L="Qwen2.5-Coder-1.5B-Instruct behind llama.cpp (Q4_K_M, 1 thread), one step at a time, prompt $P"
python $B/report.py --scores $S --tag $TAG --out $R --fp-per-kind --label "$L"
python $B/report.py --scores $S --tag $TAG --out $R --suffix=-arith --label "$L, arithmetic-task rule"
