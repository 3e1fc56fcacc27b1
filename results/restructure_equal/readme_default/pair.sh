#!/usr/bin/env bash
# README default before (8e4f4b5) and after (86f57b6) the Swarm split, back to back, alone on the machine
cd /tmp/pair/scripts
export DGRPO_CACHE=/tmp/h32/cache
for side in before after; do
  rm -rf /tmp/pair/runs_$side
  echo "$side start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
  /usr/bin/time -v -o /tmp/pair/time_$side.txt ./runs.sh /tmp/h32/$side/src /tmp/pair/runs_$side default
  echo "$side rc $? end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
done
