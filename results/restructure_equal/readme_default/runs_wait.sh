#!/usr/bin/env bash
# both.sh's "after" step: the after run was started at 08:2x UTC alongside the before run (still inside this
# heavy slot, so that both end before the session does); hold the slot until it has ended.
# (put in place of /tmp/h32/scripts/runs.sh at 08:22 UTC; after_par.sh runs the original, runs_orig.sh)
while [ ! -f /tmp/h32/after.done ]; do sleep 15; done
exit "$(cat /tmp/h32/after.done)"
