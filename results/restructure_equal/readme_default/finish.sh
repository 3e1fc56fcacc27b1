#!/usr/bin/env bash
# copy the README default runs' compared files into the worktree and compare them
D=/work/wt/h32/results/restructure_equal/readme_default
for side in before after; do
  (cd /tmp/h32/runs_$side && find readme_default -type f \( -name metrics.jsonl -o -name peers.jsonl -o -name samples.jsonl \
     -o -name summary.json -o -name groups.json -o -name bans.json -o -name config.yaml -o -path '*/eval_reference/*.json' \) \
     -not -path '*/checkpoint/*' | while read f; do mkdir -p $D/$side/$(dirname $f); cp $f $D/$side/$f; done)
done
cd /work/wt/h32/results/restructure_equal && . /work/main/.venv/bin/activate
{ echo '$ python compare_runs.py readme_default/before readme_default/after'; python compare_runs.py readme_default/before readme_default/after; } > readme_default/compare.txt
cat readme_default/compare.txt
