#!/bin/bash
# Issue 42 item 5: Level 2 as shipped (configs/level2.yaml: 200 corrected draws per galaxy,
# float32 draws and Gauss-Newton steps) on the 2-D grid +-(0.02, -0.02), +-(0.02, +0.02),
# to sigma_m <= 3e-4: 9,000 seeds x 8 images x 32 galaxies = 2,304,000 galaxies (the
# 3,000-seed campaign of level2_cpu_2d_wide/ gave 4.95e-4, so ~8,200 seeds; this folder's
# 9,000-seed campaign gave m1_err 2.98e-4; at map_config.tol 1e-5, 9,000 seeds gave just
# above 3e-4 and the campaign was grown to 9,200: level2_2d_3e4_tol/grow.log), on the
# 2-core CPU, no GPU.
# OUT (default: this folder) is the record's folder: a campaign at another config or commit
# writes its own (results/validation/level2_2d_3e4_tol/ at map_config.tol 1e-5).
# Stage 1: TASKS array tasks of bias-run, PAR at a time (one: XLA spreads one process over
# both cores; two processes ran slower together than one alone, seen by hand), then one task
# over the whole plan (runs only what an interrupted task left: resume), only when a task
# ended with neither 0 nor 1 (1: complete, some realizations recorded as failed, which a
# rerun fails again, deterministically). Every image is
# written by ONE commit: SRC is a clean checkout (git worktree) of it, run with
# PYTHONPATH=$SRC/src; its commit is stamped in $ROOT/source_commit and a rerun from
# another commit (or a dirty tree) refuses to grow the campaign.
# Stages 2 and 3 with the analysis code of ANA (default: this repository; a clean checkout
# of its commit, run with PYTHONPATH=$ANA/src, stamped in $ROOT/analysis_commit): each array task's partial (bias-extract --array-task-id, as the
# emitted array script does when a task ends), then the reduction (bias-extract) and
# bias-stats --requirement lsst-project, each under /usr/bin/time -v; then
# bench/campaign_record.py writes validation.json from the logs this script wrote.
# Growing a campaign: with SIGMA set (the target sigma_m, e.g. 3e-4), after bias-stats
# `bench/campaign_record.py ROOT --grow SIGMA` decides from m1's and m2's errors alone
# (never from m) whether the plan is grown and to how many seeds, writes the "grown" line
# to grow.log, keeps the smaller campaign's stats/ and summary.csv as stats_n<N>/ and
# removes runs.done; this script then runs the grown plan with TASKS=1 (one process over
# it runs only the new realizations), keeps PTASKS (those tasks' partials exist, so none
# is written again and the reduction reads only the new realizations), and repeats until
# sigma_m is at most SIGMA. The record (campaign_record.py --out) is written before each
# growth and again at the end; it copies bias-stats' plots/ too.
# By hand, the same: N=<grown> TASKS=1 PTASKS=<the first run's TASKS> after removing
# runs.done, summary.csv and stats/.
# Each stage is skipped when its output exists, so the same command finishes an
# interrupted campaign (a task with an rc line in grow.log since its N's start line is not
# started again).
#   SRC=/path/to/clean/checkout ROOT=/work/l2_3e4 bash results/validation/level2_2d_3e4/run.sh
#   SRC=... ANA=<the same> ROOT=... OUT=results/validation/level2_2d_3e4_tol N=9000 TASKS=4 \
#     SIGMA=3e-4 bash results/validation/level2_2d_3e4/run.sh   (grew to 9,200 seeds)
# (level2_2d_3e4_tol/ as committed ran before SIGMA existed: 9,000 seeds, then the growth by
# hand, N=9200 TASKS=1 PTASKS=4; its grow.log's "grown" line was written by hand, and its
# plots/ copied by hand.)
set -u
SRC=${SRC:?a clean checkout of the commit that runs the campaign}
ROOT=${ROOT:-/work/l2_3e4}
PY=${PY:-python}
N=${N:-9000}
TASKS=${TASKS:-36}
PAR=${PAR:-1}
PTASKS=${PTASKS:-$TASKS}  # the array tasks whose partials stage 2 writes
SIGMA=${SIGMA:-}  # the target sigma_m: grow the plan until m1's and m2's errors are below
WAIT_PID=${WAIT_PID:-}  # a previous run's queue to let finish first
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
ANA=${ANA:-$REPO}
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)}
mkdir -p "$ROOT/logs"
commit=$(git -C "$SRC" rev-parse HEAD) || exit 1
if [ -n "$(git -C "$SRC" status --porcelain --untracked-files=no)" ]; then
  echo "$SRC has uncommitted changes: the campaign runs from a clean commit" >&2; exit 2
fi
if [ -f "$ROOT/source_commit" ] && [ "$(cat "$ROOT/source_commit")" != "$commit" ]; then
  echo "$ROOT was written by $(cat "$ROOT/source_commit"), not $commit" >&2; exit 2
fi
echo "$commit" > "$ROOT/source_commit"
export PY ROOT N TASKS PAR SRC
task() {  # array task $1 of $2 ($2 = 1: the whole plan)
  local t0; t0=$(date +%s.%N)
  PYTHONPATH="$SRC/src" nice -n 5 $PY -m shearbatch run --config "$SRC/configs/level2.yaml" \
    --shear-grid-g2 -0.02,0.02 --set campaign.draws=estimator --n-realizations "$N" \
    --base-seed 90000 --batch-size 32 --no-progress --array-task-id "$1" \
    --array-task-count "$2" --output-dir "$ROOT/runs" >> "$ROOT/logs/task_$2_$1.log" 2>&1
  local rc=$?
  echo "$(date -Is) task $1/$2 rc=$rc start=$t0 end=$(date +%s.%N)" >> "$ROOT/grow.log"
}
export -f task
if [ -n "$WAIT_PID" ]; then
  while kill -0 "$WAIT_PID" 2>/dev/null; do sleep 20; done
fi
acommit=$(git -C "$ANA" rev-parse HEAD)
dirty=$([ -n "$(git -C "$ANA" status --porcelain --untracked-files=no -- src)" ] && echo 1 || echo 0)
echo "$acommit dirty=$dirty" > "$ROOT/analysis_commit"
sb() { PYTHONPATH="$ANA/src" /usr/bin/time -v "$PY" -m shearbatch "$@"; }
since_start() {  # grow.log from the first start line of this N (a resume appends none)
  sed -n "/ start n=$N /,\$p" "$ROOT/grow.log" 2>/dev/null
}
# a campaign grown before (its "grown" line in grow.log): resume at its grown N
last=$(sed -n 's/.* grown: n [0-9]* -> \([0-9]*\) .*/\1/p' "$ROOT/grow.log" 2>/dev/null | tail -1)
if [ -n "$last" ] && [ "$last" -gt "$N" ]; then export N="$last" TASKS=1; fi
while :; do
  if [ ! -f "$ROOT/runs.done" ]; then
    since_start | grep -q . || \
      echo "$(date -Is) start n=$N tasks=$TASKS commit=$commit" >> "$ROOT/grow.log"
    for i in $(seq 0 $((TASKS - 1))); do
      since_start | grep -qE " task $i/$TASKS rc=[01] " || echo "$i"
    done | xargs -r -P "$PAR" -I{} bash -c "task {} $TASKS"
    for i in $(seq 0 $((TASKS - 1))); do
      since_start | grep -qE " task $i/$TASKS rc=[01] " || { task 0 1; break; }
    done
    echo "$(date -Is) runs done" >> "$ROOT/grow.log" && touch "$ROOT/runs.done"
  fi
  for i in $(seq 0 $((PTASKS - 1))); do
    p=$(printf "%s/runs/partials/task-%05d-of-%05d.nc.sum.json" "$ROOT" "$i" "$PTASKS")
    [ -f "$p" ] && continue
    sb extract --input-dir "$ROOT/runs" --array-task-id "$i" \
      --array-task-count "$PTASKS" --workers 2 --no-progress > "$ROOT/logs/extract_task_$i.log" 2>&1
    echo "$(date -Is) partial $i/$PTASKS rc=$?" >> "$ROOT/grow.log"
  done
  if [ ! -f "$ROOT/summary.csv" ]; then
    sb extract --input-dir "$ROOT/runs" --output "$ROOT/summary.csv" \
      --workers 2 --no-progress > "$ROOT/extract.log" 2>&1 || exit 1
  fi
  if [ ! -f "$ROOT/stats/bias_results.json" ]; then
    sb stats --input "$ROOT/summary.csv" --output-dir "$ROOT/stats" \
      --requirement lsst-project > "$ROOT/stats.log" 2>&1
  fi
  PYTHONPATH="$ANA/src" "$PY" "$REPO/bench/campaign_record.py" "$ROOT" --out "$OUT"
  rc=$?
  [ -n "$SIGMA" ] || exit $rc
  grown=$(PYTHONPATH="$ANA/src" "$PY" "$REPO/bench/campaign_record.py" "$ROOT" --grow "$SIGMA") \
    || exit 2
  [ -n "$grown" ] || exit $rc
  export N="$grown" TASKS=1  # the grown plan: one process runs only its new realizations
done
