#!/usr/bin/env bash
# usage: runs.sh SRC OUT [default [OVERRIDES...]]  — one run per recipe on the tiny model of tests/conftest.py
# (results/attack_matrix/tiny/make_tiny_model.py, its output path set to /tmp/p32/tiny), each with attacks and
# defenses that go through the code issue 32 moved (routing by the attack, admission rules, rewards); with
# `default`, the README's default run (SmolLM2-135M-Instruct) instead, with OVERRIDES (e.g. fewer rounds).
set -e
. /work/main/.venv/bin/activate
export PYTHONPATH=$1:$(dirname "$(readlink -f "$0")")
OUT=$2
T=model.name=/tmp/p32/tiny
EVEN="task.kind=evenlen:even_length threads=1 sampling.max_new_tokens=10 eval.every=2 eval.n_prompts=3 grpo.lr=0.01"
OPEN=swarm.protocol.enforce_length=false  # the attackers' poisons (longer than 10 tokens) reach the defenses
run() { python -m dgrpo "$@" out_dir=$OUT > $OUT/$name.log 2>&1; }
mkdir -p $OUT
if [ "$3" = default ]; then
  name=readme_default; run run name=$name "${@:4}"; exit; fi
name=horizontal_replayed_round; run run $T $EVEN name=$name rounds=3 swarm.malicious=[3] attack.kind=replayed_round $OPEN \
  swarm.group_size=4 swarm.prompts_per_round=2 'defenses=[{kind: topk}, {kind: replay}]' swarm.protocol.ban_after=4
name=horizontal_replay_other_run; run run $T $EVEN name=$name rounds=3 swarm.malicious=[3] attack.kind=replay attack.of=other_run $OPEN \
  swarm.group_size=4 swarm.prompts_per_round=2
name=vertical_equivocation; run run $T $EVEN name=$name rounds=3 swarm.mode=vertical swarm.malicious=[3] attack.kind=equivocation \
  $OPEN swarm.group_size=4 swarm.prompts_per_round=4 'defenses=[{kind: reward_outlier, z: 0.9}, {kind: topk}]'
name=federated_median_signflip; run federated $T $EVEN name=$name rounds=2 swarm.mode=vertical swarm.nodes=4 \
  swarm.prompts_per_round=4 swarm.group_size=4 grpo.max_grad_norm=1e6 swarm.malicious=[2] federated.aggregator=median \
  federated.attack=sign_flipping
name=ensemble_injection; run ensemble $T $EVEN name=$name rounds=2 swarm.nodes=4 swarm.group_size=4 swarm.prompts_per_round=2 \
  swarm.malicious=[1] attack.kind=injection attack.poisoned_per_group=1 $OPEN ensemble.groups=2 eval.every=1
name=harden; run harden $T name=$name threads=1 sampling.max_new_tokens=6 eval.every=1 eval.n_prompts=2 task.n_train=20 \
  task.n_val=4 task.few_shot=0 swarm.nodes=1 swarm.group_size=2 swarm.prompts_per_round=2 hardening.steps=2 \
  hardening.attack_rounds=2 hardening.benign_rounds=1 hardening.n_train=8 hardening.n_val=2 hardening.group_size=3 \
  hardening.prompts_per_step=2 hardening.lr=1e-3
