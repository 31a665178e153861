#!/usr/bin/env bash
# Issue 13 item 5: model bias. GalSim generator; the model is an exponential.
# control: GalSim draws the exponential too (m ~ 0); sersic2: GalSim draws Sersic n = 2.
# Round galaxies at S/N 200, Moffat PSF (beta 3.5, FWHM 0.8"), paired +-0.02, MAP, float64.
set -e
cd "$(dirname "$0")/../../.."
BIN=${BIN:-.venv/bin}
D=results/validation/misspecified_sersic
N=${N:-30}
for name in control sersic2; do
  start=$(date +%s)
  $BIN/bias-run --config $D/$name.yaml --n-realizations $N --batch-size 30 \
    --output-dir $D/runs_$name --no-progress
  $BIN/bias-extract --input-dir $D/runs_$name --output $D/$name.csv --no-progress
  $BIN/bias-stats --input $D/$name.csv --output-dir $D/$name --level level_2 || true
  echo "$name: N=$N seeds (x2 paired), wall $(( $(date +%s) - start )) s"
done
