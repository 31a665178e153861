#!/usr/bin/env bash
# Issue 13 PSF-anisotropy target: c with the PSF ellipticity known to the model (control)
# and with the model told a round PSF (negative control). Moffat PSF e = (0.05, 0),
# round galaxies at S/N 200, paired +-0.02, MAP, float64. Logs and wall times: run.log (known_psf);
# round_model was re-run alone (NAMES=round_model, run_round_model.log) into a fresh directory
# after its first one turned out to hold realizations of an earlier S/N 50 trial.
set -e
cd "$(dirname "$0")/../../.."
BIN=${BIN:-.venv/bin}
D=results/validation/psf_anisotropy
N=${N:-30}
for name in ${NAMES:-known_psf round_model}; do
  start=$(date +%s)
  $BIN/bias-run --config $D/$name.yaml --n-realizations $N --batch-size 30 \
    --output-dir $D/runs_$name --no-progress
  $BIN/bias-extract --input-dir $D/runs_$name --output $D/$name.csv --no-progress
  $BIN/bias-stats --input $D/$name.csv --output-dir $D/$name --level level_2 || true
  echo "$name: N=$N seeds (x2 paired), wall $(( $(date +%s) - start )) s"
done
