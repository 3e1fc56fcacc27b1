#!/usr/bin/env bash
# every 2 min: compare the rounds both README default runs finished (/tmp/h32/readme_default_partial.txt);
# when both have ended, copy and compare everything (/tmp/h32/finish.sh -> results/restructure_equal/readme_default/)
. /work/main/.venv/bin/activate
B=/tmp/h32/runs_before/readme_default; A=/tmp/h32/runs_after/readme_default
while true; do
  if [ -f $B/metrics.jsonl ] && [ -f $A/metrics.jsonl ]; then
    n=$(python3 -c "import json; print(min(len({json.loads(l)['round'] for l in open(f) if l.strip()}) for f in ('$B/metrics.jsonl', '$A/metrics.jsonl')))")
    { date -u +%FT%TZ; cat /proc/loadavg; echo "\$ python compare_runs.py --rounds $n /tmp/h32/runs_before /tmp/h32/runs_after"
      python /work/wt/h32/results/restructure_equal/compare_runs.py --rounds $n /tmp/h32/runs_before /tmp/h32/runs_after; } > /tmp/h32/readme_default_partial.txt.new
    mv /tmp/h32/readme_default_partial.txt.new /tmp/h32/readme_default_partial.txt
  fi
  if [ -f /tmp/h32/after.done ] && [ -f $B/summary.json ] && ! pgrep -f "out_dir=/tmp/h32/runs_before" > /dev/null; then
    /tmp/h32/finish.sh > /tmp/h32/finish.log 2>&1; exit
  fi
  sleep 120
done
