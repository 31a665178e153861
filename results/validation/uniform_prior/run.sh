#!/usr/bin/env bash
# Issue 12: the U(-0.9, 0.9) shear prior no longer shrinks m (MAP without the Jacobian).
# Level 0 galaxy at matched-filter S/N 30, paired +-0.05, 1000 seeds, MAP, float64.
set -e
cd "$(dirname "$0")/../../.."
for name in flat uniform09; do
  .venv/bin/bias-run --config results/validation/uniform_prior/$name.yaml --shear-grid 0.05 --paired \
    --n-realizations 1000 --batch-size 128 --output-dir results/validation/uniform_prior/runs_$name --no-progress
  .venv/bin/bias-extract --input-dir results/validation/uniform_prior/runs_$name \
    --output results/validation/uniform_prior/$name.csv --no-progress
  .venv/bin/bias-stats --input results/validation/uniform_prior/$name.csv \
    --output-dir results/validation/uniform_prior/stats_$name --level level_2 || true
done
