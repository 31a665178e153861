#!/bin/bash
# Level 2 as shipped on the 2-D grid +-(0.02, -0.02), +-(0.02, +0.02), run with the CLI on
# the 2-core CPU (no GPU was lent to that session): the campaign of level2_cpu_2d/ (500
# seeds at 72c6c8d, copied to $ROOT/runs first) grown with the same command to more seeds,
# SLICE seeds an array task, two array tasks at a time (one per core, since XLA's CPU
# program mostly keeps to one core; how two processes compare with one in galaxies/s is
# not recorded). As run (log.txt): n=1000 with SLICE=200 (its last task then ran alone), then
# n=1600 with SLICE=50, whose queue was stopped at ~9,800 images (killed tasks: their
# claims and half-written batches are what resume is for) when n=2500 (SLICE=50,
# STEPS=2500) was started to end before the session did; a single-task pass over the
# n=2500 plan (the line after xargs below) then ran the 304 images the killed tasks left,
# and the 19 that fail every time (recorded as failed). 2,500 seeds, 20,000 images.
# Then grown to 3,000 seeds: array tasks 25-29 and 55-59 of 60 at n=3000 (the slices of
# the new seeds, two at a time), the single-task pass, bias-extract and bias-stats.
# No step is started that would not end before DEADLINE (a time of day).
# python -m shearbatch = bias-run / bias-extract / bias-stats.
set -u
ROOT=${ROOT:-/tmp/l2big}
DEADLINE=${DEADLINE:-00:35}
PY=${PY:-python}
STEPS=${STEPS:-"1000 1600 2200 2800"}
SLICE=${SLICE:-50}
deadline=$(date -d "$DEADLINE" +%s)
[ "$deadline" -lt "$(date +%s)" ] && deadline=$((deadline + 86400))
last=0
task() {  # one array task of the plan of $1 seeds in $2 tasks
  nice -n 5 $PY -m shearbatch run --config configs/level2.yaml --shear-grid-g2 -0.02,0.02 \
    --set campaign.draws=estimator --n-realizations "$1" --base-seed 30000 --batch-size 32 \
    --no-progress --array-task-id "$3" --array-task-count "$2" --output-dir "$ROOT/runs" \
    >> "$ROOT/run_$1_$3.log" 2>&1
  echo "$(date -Is) n=$1 task $3/$2 rc=$?" >> "$ROOT/grow.log"
}
export -f task; export PY ROOT
for n in $STEPS; do
  if [ $last -gt 0 ] && [ $(($(date +%s) + last)) -gt "$deadline" ]; then break; fi
  t0=$(date +%s)
  echo "$(date -Is) n=$n" >> "$ROOT/grow.log"
  k=$((n / SLICE))
  seq 0 $((k - 1)) | xargs -P 2 -I{} bash -c "task $n $k {}"
  task "$n" 1 0  # the whole plan in one task: runs only what an interrupted task left
  done_n=$n
  last=$(($(date +%s) - t0))
done
echo "$(date -Is) stopped growing at n=${done_n:-0}" >> "$ROOT/grow.log"
/usr/bin/time -v $PY -m shearbatch extract --input-dir "$ROOT/runs" --output "$ROOT/summary.csv" \
  --no-progress > "$ROOT/extract.log" 2>&1
/usr/bin/time -v $PY -m shearbatch stats --input "$ROOT/summary.csv" --output-dir "$ROOT/stats" \
  --requirement lsst-project > "$ROOT/stats.log" 2>&1
echo "$(date -Is) finished" >> "$ROOT/grow.log"
