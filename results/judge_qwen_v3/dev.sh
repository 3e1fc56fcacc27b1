#!/bin/bash
# Dev stage of the step judge (results/judge_qwen_v3/README.md "Plan"), until DEADLINE (UTC). From the repository root:
#   nice -n 10 bash results/judge_qwen_v3/dev.sh 23:00
# 1. prompts `step` and `step-kind` on 20 evenly spaced dev rows of each tuned set (every other row of the 40);
# 2. the prompt chosen on those rows (choose_prompt.py, every honest kind <= 5 %); 3. the chosen prompt on the
# rest of the 40 rows of each tuned set; 4. its rules chosen (report.py): primary (every honest kind) and arithmetic-task.
set -u
DEADLINE=$(date -u -d "$1" +%s)
R=results/judge_qwen_v3; S=$R/scores.jsonl; G=${GSM8K:-/work/shared/data/gsm8k/test.jsonl}; B=benchmarks/judge_table1
export THREADS=${THREADS:-1} PORT=${PORT:-8063}
TUNED="hail equation honest_sampled honest_oracle honest_gsm8k honest_python"
sc() { bash $B/serve_and_score.sh qwen2.5-coder-1.5b-instruct --out $S --split dev --split-version v2 --gsm8k $G \
  --stop-at $DEADLINE --granularity step --max-steps 8 --sets $TUNED "$@"; }
sc --per-set 20 --prompt step --tag q15v3-step
sc --per-set 20 --prompt step-kind --tag q15v3-stepkind
TAG=$(python $B/choose_prompt.py --scores $S --tags q15v3-step q15v3-stepkind --fp-per-kind --out $R/prompt_choice.json) || exit 1
P=step; [ "$TAG" = q15v3-stepkind ] && P=step-kind; echo "prompt chosen on dev: $P"
sc --per-set 40 --prompt $P --tag $TAG
[ $(( DEADLINE - $(date -u +%s) )) -gt 0 ] || { echo "deadline passed before the 40 rows were judged: rule not frozen"; exit 1; }
L="Qwen2.5-Coder-1.5B-Instruct behind llama.cpp (Q4_K_M, 1 thread), one step at a time, prompt $P"
python $B/report.py --scores $S --tag $TAG --out $R --fp-per-kind --label "$L"
python $B/report.py --scores $S --tag $TAG --out $R --fp-per-kind --honest-sets honest_sampled honest_oracle --suffix=-arith \
  --label "$L, arithmetic-task rule"
