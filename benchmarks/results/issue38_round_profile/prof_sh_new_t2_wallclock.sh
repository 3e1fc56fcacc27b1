#!/bin/bash
# usage: prof.sh NAME SRC_DIR [overrides...]
name=$1; src=$2; shift 2
. /work/main/.venv/bin/activate
export PYTHONPATH=$src
echo "start $(date -u +%T) load $(cat /proc/loadavg)" > /tmp/h38q_runs/$name.status
nice -n 10 /usr/bin/time -v -o /tmp/h38q_runs/$name.time python -c "
import cProfile, pstats, sys, time
from dgrpo.cli import main
sys.argv=['dgrpo','run','rounds=3','eval.first=false','eval.every=100','eval.n_prompts=4','eval.greedy=false','eval.drift=false','out_dir=/tmp/h38q_runs','name=$name']+sys.argv[1:]
pr=cProfile.Profile(); t=time.process_time(); pr.enable()
try: main()
finally:
    pr.disable(); print('cpu', time.process_time()-t); pr.dump_stats('/tmp/h38q_runs/$name.prof')
" "$@" > /tmp/h38q_runs/$name.log 2>&1
echo "end $(date -u +%T) load $(cat /proc/loadavg)" >> /tmp/h38q_runs/$name.status
