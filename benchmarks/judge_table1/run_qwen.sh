#!/bin/bash
# The served Qwen judge's Table 1 row end to end (issue 37, must-have 2), resumable, stopping at a deadline:
#   bash benchmarks/judge_table1/run_qwen.sh MODEL SHORT DEADLINE_UTC   e.g. qwen2.5-coder-1.5b-instruct q15 06:08
# 1. dev, 20 rows of each dev set, under each prompt (plain, fewshot); 2. the prompt chosen on them (choose_prompt.py);
# 3. the rest of dev under that prompt; 4. the rule chosen on all of dev and frozen (report.py writes rule_<tag>.json);
# 5. held out, 50 evenly spaced rows of each set, then 100, then 200 of each poison set (supersets: nothing judged twice),
#    until DEADLINE_UTC; 6. the table. THREADS (default 2) llama.cpp threads.
set -u
MODEL=$1; SHORT=$2; DEADLINE=$(date -u -d "$3" +%s)
OUT=${OUT:-results/judge_qwen}; S=$OUT/scores.jsonl; G=${GSM8K:-/work/shared/data/gsm8k/test.jsonl}
export THREADS=${THREADS:-2}
B=benchmarks/judge_table1
left() { echo $(( DEADLINE - $(date -u +%s) )); }
score() { [ "$(left)" -gt 30 ] || return 1; bash $B/serve_and_score.sh "$MODEL" --out $S --stop-at "$DEADLINE" "$@"; }
mkdir -p $OUT
for P in plain fewshot; do score --split dev --per-set 20 --prompt $P --tag $SHORT-$P; done
TAG=$(python $B/choose_prompt.py --scores $S --tags $SHORT-plain $SHORT-fewshot --out $OUT/prompt_choice_$SHORT.json) || exit 1
P=${TAG#"$SHORT-"}; echo "prompt chosen on dev: $P (tag $TAG)"
score --split dev --prompt $P --tag $TAG
[ -f $OUT/rule_$TAG.json ] || python $B/report.py --scores $S --tag $TAG --out $OUT --label "$MODEL, prompt $P" > /dev/null
for N in 50 100; do score --split heldout --per-set $N --prompt $P --tag $TAG --gsm8k $G; done
score --split heldout --per-set 200 --prompt $P --tag $TAG --gsm8k $G \
  --sets hail equation equation_sampled gleeb code master_key judge_bait
python $B/report.py --scores $S --tag $TAG --out $OUT --label "$MODEL behind llama.cpp (Q4_K_M, $THREADS threads), prompt $P"
