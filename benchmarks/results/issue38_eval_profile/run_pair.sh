#!/bin/bash
# before (c7526bb) then after (given SRC), 2 rounds, evaluation every round, threads=1
. /work/main/.venv/bin/activate
label=$1; src=$2
out=/tmp/h38e_runs/$label
rm -rf $out; mkdir -p $out
echo "start $(date -u) load $(cat /proc/loadavg)" > $out/info.txt
PYTHONPATH=$src nice -n 10 /usr/bin/time -v python -m dgrpo run rounds=2 eval.every=1 threads=1 out_dir=$out/runs name=r > $out/stdout.txt 2> $out/time.txt
echo "end $(date -u) load $(cat /proc/loadavg) rc $?" >> $out/info.txt
