#!/bin/bash
# Issue 37 must-have 3, continued: the 12-round Fig. 5 runs of fig5.sh resumed to 30 rounds (undefended showed ASR 0 at
# r12: the payload had not spread yet), then the honest reference and the checker + detector run. Resumable: rerun it.
echo ${AUTOGROUP_NICE:-19} > /proc/self/autogroup 2>/dev/null; echo 1000 > /proc/self/oom_score_adj
R=/work/evidence/repo37f; cd $R && . /work/main/.venv/bin/activate && export PYTHONPATH=$R/src
. /work/evidence/run37/judge_server.sh; OUT=/work/evidence/run37/fig5; PORT=${PORT:-8065}; CFG=configs/heterogeneous_qwen_smollm2_hail.yaml; N=${ROUNDS:-30}
done_run() { [ -f $OUT/$1/metrics.jsonl ] && python -c "
import json,sys; rows=[json.loads(l) for l in open('$OUT/$1/metrics.jsonl') if l.strip()]
sys.exit(0 if any(r.get('round')==$N and 'eval/accuracy' in r for r in rows) else 1)"; }
resume() {  # name: resume its checkpoint to N rounds
  if done_run $1; then echo "$1 finished at $N"; return; fi
  OMP_NUM_THREADS=1 nice -n 19 python -m dgrpo resume $OUT/$1 rounds=$N >> $OUT/$1.log 2>&1
  echo "$1 rc=$? $(date -u +%H:%M)"
}
resume none
if ! done_run judge_v4; then
  with_judge_server resume judge_v4
fi
