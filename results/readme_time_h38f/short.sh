#!/usr/bin/env bash
# A short README-shaped job (2 rounds, evaluations of 16 prompts sampled + greedy with drift at rounds 0, 1, 2,
# one thread) from a source tree, empty converted-weights cache and HOME, at nice 10: CPU seconds and metrics.
# usage: short.sh SRC_TREE OUT_DIR
set -u
src=$1; out=$2
rm -rf "$out" && mkdir -p "$out/cache" "$out/home"
. /work/main/.venv/bin/activate
echo "start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)" > "$out/status.txt"
cd "$src" && PYTHONPATH=$src/src DGRPO_CACHE=$out/cache HOME=$out/home nice -n 10 /usr/bin/time -v -o "$out/time.txt" \
  python -m dgrpo run threads=1 rounds=2 eval.every=1 eval.n_prompts=16 out_dir="$out/run" > "$out/log.txt" 2>&1
echo "rc $? end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)" >> "$out/status.txt"
