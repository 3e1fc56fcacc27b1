#!/bin/bash
# usage: cpu.sh NAME SRC_DIR [extra overrides...]  -> CPU-time cProfile of a 3-round run (threads given by overrides)
name=$1; src=$2; shift 2
. /work/main/.venv/bin/activate
export PYTHONPATH=$src
rm -rf /tmp/h38q_runs/$name
echo "start $(date -u +%T) load $(cat /proc/loadavg)" > /tmp/h38q_runs/$name.status
nice -n 10 /usr/bin/time -v -o /tmp/h38q_runs/$name.time python -c "
import cProfile, sys, time
from dgrpo.cli import main
sys.argv=['dgrpo','run','rounds=3','eval.every=100','eval.n_prompts=4','eval.greedy=false','eval.drift=false','out_dir=/tmp/h38q_runs','name=$name']+sys.argv[1:]
pr=cProfile.Profile(time.process_time); t=time.process_time(); w=time.perf_counter(); pr.enable()
try: main()
finally:
    pr.disable(); print('cpu', time.process_time()-t, 'wall', time.perf_counter()-w); pr.dump_stats('/tmp/h38q_runs/$name.prof')
" "$@" > /tmp/h38q_runs/$name.log 2>&1
echo "end $(date -u +%T) load $(cat /proc/loadavg)" >> /tmp/h38q_runs/$name.status
