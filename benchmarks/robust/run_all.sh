#!/usr/bin/env bash
# The CPU-scale runs behind docs/robust.md, one at a time (2 CPU cores shared: threads=1).
# Usage: bash benchmarks/robust/run_all.sh [federated|ensemble|harden|all]
# Runs land in runs/robust/; benchmarks/robust/collect.py copies their small files (metrics, plots,
# config, command) into results/robust/. Weights never leave runs/.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=runs/robust
what=${1:-all}

run() {  # run NAME dgrpo-args...: skip when finished, record the command
  local name=$1; shift
  if [ -f "$OUT/$name/.done" ]; then echo "skip $name"; return; fi
  rm -rf "$OUT/$name"
  echo "dgrpo $* out_dir=$OUT name=$name" > "/tmp/dgrpo_cmd_$name.txt"
  local t0=$(date +%s)
  dgrpo "$@" out_dir=$OUT name=$name
  mv "/tmp/dgrpo_cmd_$name.txt" "$OUT/$name/command.txt"
  echo "$(( $(date +%s) - t0 ))" > "$OUT/$name/wall_seconds.txt"
  touch "$OUT/$name/.done"
}

# --- 1. robust aggregators vs the Normalized attack: 4 honest nodes + 1 attacker, LoRA deltas
FED="threads=1 seed=0 rounds=8 swarm.mode=vertical swarm.group_size=8 grpo.lr=3e-4 federated.lora=true \
federated.probe=true eval.every=4 eval.n_prompts=32"
if [[ $what == federated || $what == all ]]; then
  # baseline: the same 4 honest nodes (same local prompts and seeds), no attacker
  run fed_average_noattack federated $FED swarm.nodes=4 swarm.prompts_per_round=8 federated.aggregator=average
  for agg in krum median average trimmed_mean geometric_median centered_clipping multi_krum; do
    run fed_${agg}_normalized federated $FED swarm.nodes=5 swarm.prompts_per_round=10 swarm.malicious=[4] \
      federated.attack=normalized federated.aggregator=$agg
  done
fi

# --- 2. ensemble of 3 swarms vs "hail to the thief", 1 malicious node of 4 (groups [0,1] [2] [3])
if [[ $what == ensemble || $what == all ]]; then
  run ensemble_hail ensemble threads=1 seed=0 rounds=9 swarm.nodes=4 swarm.malicious=[1] attack.kind=injection \
    swarm.mode=horizontal swarm.prompts_per_round=4 swarm.group_size=8 grpo.lr=5e-5 ensemble.groups=3 \
    eval.every=3 eval.n_prompts=32
fi

# --- 3. TokenBuncher: harden, then malicious ("Sure") and benign (arithmetic) GRPO from both models
# The benign phase adds the format reward (task.format_weight=1): with the binary reward neither model
# learns visibly in 8-16 rounds at this scale (results/robust/tokenbuncher/benign_lr*/).
if [[ $what == harden || $what == all ]]; then
  run tokenbuncher harden threads=1 seed=0 hardening.response_tokens=40 hardening.steps=20 \
    hardening.attack_rounds=12 hardening.benign_rounds=12 grpo.lr=5e-5 eval.every=4 eval.n_prompts=32 \
    swarm.nodes=1 swarm.prompts_per_round=4 swarm.group_size=8 task.format_weight=1.0
fi
