#!/bin/bash
# Dev stage of split v2 (README "Plan" and "Amendment"), until DEADLINE (UTC, e.g. 14:50). From the repository root:
#   nice -n 10 bash results/judge_qwen_v2/dev.sh 14:50
# 0. (done once, before this) carry_v1.py: v1's q15-plain judgments of v2 dev rows -> tag q15v2-plain; compare_keys.txt
# 1. prompt `relevant` on the compared rows; 2. the prompt chosen on the rows judged under both (choose_prompt.py,
# per-kind bound); 3. the chosen prompt filled to 40 judged rows of each tuned set; 4. its rule frozen (report.py).
set -u
DEADLINE=$(date -u -d "$1" +%s)
R=results/judge_qwen_v2; S=$R/scores.jsonl; G=${GSM8K:-/work/shared/data/gsm8k/test.jsonl}; B=benchmarks/judge_table1
export THREADS=${THREADS:-1} PORT=${PORT:-8057}
TUNED="hail equation honest_sampled honest_oracle honest_gsm8k honest_python"
sc() { bash $B/serve_and_score.sh qwen2.5-coder-1.5b-instruct --out $S --split dev --split-version v2 --gsm8k $G \
  --stop-at $DEADLINE "$@"; }
sc --keys $R/compare_keys.txt --prompt relevant --tag q15v2-relevant
TAG=$(python $B/choose_prompt.py --scores $S --tags q15v2-plain q15v2-relevant --fp-per-kind --out $R/prompt_choice.json) || exit 1
P=${TAG#q15v2-}; echo "prompt chosen on dev: $P"
sc --fill 40 --prompt $P --tag $TAG --sets $TUNED
[ $(( DEADLINE - $(date -u +%s) )) -gt 0 ] || { echo "deadline passed before the fill ended: rule not frozen"; exit 1; }
python $B/report.py --scores $S --tag $TAG --out $R --fp-per-kind --label "Qwen2.5-Coder-1.5B-Instruct behind llama.cpp (Q4_K_M, 1 thread), prompt $P"
