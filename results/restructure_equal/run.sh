#!/usr/bin/env bash
# usage: run.sh SRC OUT  — the matrix on the tiny model of tests/conftest.py (results/attack_matrix/tiny/make_tiny_model.py)
set -e
. /work/main/.venv/bin/activate
export PYTHONPATH=$1
python -m dgrpo paper matrix --scale cpu --out $2 --set model=/tmp/p32/tiny --set n_honest=256 --set n_poisoned=64 \
  --set threads=1 --set max_new_tokens=16 \
  --set 'attack_overrides={"equation_sampled": ["attack.candidates=2"], "grind_hail": ["attack.tries=4"], "dos_sampled": ["attack.tries=4"], "topk_hail": ["attack.tries=1"], "topk_gleeb": ["attack.tries=1"], "dos_prompt_grind": ["attack.prompt_tries=2"]}' ${3:+--set "$3"}
