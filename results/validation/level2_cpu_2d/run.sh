#!/bin/bash
# Level 2 as shipped on the 2-D grid +-(0.02, -0.02), +-(0.02, +0.02), run with the CLI on
# the 2-core CPU (no GPU was lent to that session), at commit 72c6c8d, nice 10 beside
# other work. The plan is grown 100 seeds at a time (bias-run resumes and grows it) and no
# chunk is started that would not end before DEADLINE (a time of day): 500 seeds then.
# python -m shearbatch = bias-run / bias-extract / bias-stats.
set -u
ROOT=${ROOT:-/tmp/l2/camp}
DEADLINE=${DEADLINE:-21:47}
PY=${PY:-python}
deadline=$(date -d "$DEADLINE" +%s)
n=0 last=0
while true; do
  n=$((n + 100))
  if [ $n -gt 100 ] && [ $(($(date +%s) + last)) -gt "$deadline" ]; then n=$((n - 100)); break; fi
  t0=$(date +%s)
  echo "$(date -Is) n=$n" >> "$ROOT/grow.log"
  nice -n 10 $PY -m shearbatch run --config configs/level2.yaml --shear-grid-g2 -0.02,0.02 \
    --set campaign.draws=estimator --n-realizations $n --base-seed 30000 --batch-size 32 \
    --no-progress --output-dir "$ROOT/runs" >> "$ROOT/run.log" 2>&1
  echo "$(date -Is) n=$n rc=$?" >> "$ROOT/grow.log"
  last=$(($(date +%s) - t0))
done
echo "$(date -Is) stopped growing at n=$n" >> "$ROOT/grow.log"
/usr/bin/time -v $PY -m shearbatch extract --input-dir "$ROOT/runs" --output "$ROOT/summary.csv" \
  --no-progress > "$ROOT/extract.log" 2>&1
/usr/bin/time -v $PY -m shearbatch stats --input "$ROOT/summary.csv" --output-dir "$ROOT/stats" \
  --requirement lsst-project > "$ROOT/stats.log" 2>&1
