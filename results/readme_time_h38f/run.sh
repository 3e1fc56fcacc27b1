#!/usr/bin/env bash
# The README main job on its embedded defaults, as results/readme_quiet_2026-12-05_evening/run.sh but from a given
# source tree (a worktree at a commit), at nice 10 on the shared machine: empty converted-weights cache and HOME.
# usage: run.sh SRC_TREE OUT_DIR   (OUT_DIR gets time.txt, status.txt, log.txt, the run folder run/)
set -u
src=$1; out=$2
rm -rf "$out" && mkdir -p "$out/cache" "$out/home"
. /work/main/.venv/bin/activate
echo "start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg) commit $(git -C "$src" log --oneline -1)" > "$out/status.txt"
cd "$src" && PYTHONPATH=$src/src DGRPO_CACHE=$out/cache HOME=$out/home nice -n 10 /usr/bin/time -v -o "$out/time.txt" \
  python -m dgrpo run out_dir="$out/run" > "$out/log.txt" 2>&1
echo "rc $? end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)" >> "$out/status.txt"
