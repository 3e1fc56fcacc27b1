#!/usr/bin/env bash
# the README default run before (8e4f4b5) and after (86f57b6) the Swarm split, back to back in one heavy slot
cd /tmp/h32/scripts  # a copy of results/restructure_equal/runs.sh (the worktree is edited meanwhile)
export DGRPO_CACHE=/tmp/h32/cache
for side in before after; do
  echo "$side start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
  /usr/bin/time -v -o /tmp/h32/time_$side.txt ./runs.sh /tmp/h32/$side/src /tmp/h32/runs_$side default
  echo "$side rc $? end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
done
