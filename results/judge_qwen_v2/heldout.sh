#!/bin/bash
# Held out of split v2 with the frozen rule (rule_$TAG.json must exist and be committed first), in nested stages of
# evenly spaced rows per set (10, 20, 40, 80, 160: each a superset of the one before, nothing judged twice), every
# stage stopping at DEADLINE (UTC), then the table. From the repository root:
#   nice -n 10 bash results/judge_qwen_v2/heldout.sh q15v2-relevant 15:30
set -u
TAG=$1; P=${TAG#q15v2-}; DEADLINE=$(date -u -d "$2" +%s)
R=results/judge_qwen_v2; S=$R/scores.jsonl; G=${GSM8K:-/work/shared/data/gsm8k/test.jsonl}; B=benchmarks/judge_table1
export THREADS=${THREADS:-1} PORT=${PORT:-8057}
[ -f $R/rule_$TAG.json ] && git ls-files --error-unmatch $R/rule_$TAG.json > /dev/null || { echo "rule_$TAG.json not committed"; exit 1; }
SETS="hail equation honest_sampled honest_oracle honest_gsm8k honest_python gleeb code master_key judge_bait"
for N in 10 20 40 80 160; do
  [ $(( DEADLINE - $(date -u +%s) )) -gt 30 ] || break
  bash $B/serve_and_score.sh qwen2.5-coder-1.5b-instruct --out $S --split heldout --split-version v2 --gsm8k $G \
    --stop-at $DEADLINE --per-set $N --prompt $P --tag $TAG --sets $SETS
done
python $B/report.py --scores $S --tag $TAG --out $R --fp-per-kind \
  --label "Qwen2.5-Coder-1.5B-Instruct behind llama.cpp (Q4_K_M, 1 thread), prompt $P"
