#!/usr/bin/env bash
# README main job timing: fresh clone of main, empty converted-weights cache and HOME, nothing else on purpose
rm -rf /tmp/rt2/clone /tmp/rt2/home /tmp/rt2/out && mkdir -p /tmp/rt2/home && cp -r /tmp/rt/cache /tmp/rt2/cache
git clone -q /work/main /tmp/rt2/clone && cd /tmp/rt2/clone && git log --oneline -1 > /tmp/rt2/commit.txt
. /work/main/.venv/bin/activate
echo "start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)" > /tmp/rt2/status.txt
PYTHONPATH=$PWD/src DGRPO_CACHE=/tmp/rt2/cache HOME=/tmp/rt2/home /usr/bin/time -v -o /tmp/rt2/time.txt python -m dgrpo run out_dir=/tmp/rt2/out > /tmp/rt2/log.txt 2>&1
echo "rc $? end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)" >> /tmp/rt2/status.txt
