#!/usr/bin/env bash
# README main job timing: fresh clone of main, empty converted-weights cache and HOME, nothing else on purpose
rm -rf /tmp/rt/clone /tmp/rt/cache /tmp/rt/home /tmp/rt/out && mkdir -p /tmp/rt/cache /tmp/rt/home
git clone -q /work/main /tmp/rt/clone && cd /tmp/rt/clone && git log --oneline -1 > /tmp/rt/commit.txt
. /work/main/.venv/bin/activate
echo "start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)" > /tmp/rt/status.txt
PYTHONPATH=$PWD/src DGRPO_CACHE=/tmp/rt/cache HOME=/tmp/rt/home /usr/bin/time -v -o /tmp/rt/time.txt python -m dgrpo run out_dir=/tmp/rt/out > /tmp/rt/log.txt 2>&1
echo "rc $? end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)" >> /tmp/rt/status.txt

