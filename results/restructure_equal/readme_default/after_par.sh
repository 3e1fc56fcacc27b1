#!/usr/bin/env bash
# the after run, started while both.sh's before run holds the heavy slot (both.sh's after step waits for it)
cd /tmp/h32/scripts
export DGRPO_CACHE=/tmp/h32/cache
echo "after start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
/usr/bin/time -v -o /tmp/h32/time_after_run.txt ./runs_orig.sh /tmp/h32/after/src /tmp/h32/runs_after default
rc=$?
echo "after rc $rc end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
echo $rc > /tmp/h32/after.done
