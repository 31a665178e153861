#!/usr/bin/env bash
# Issue 45: AnaCal (FPFS) beside the forward model on the very same realizations (one
# campaign each, `--estimators anacal`), at Levels 0, 1 (MAP) and 2 on the 2-D grid
# +-(0.02, -0.02), +-(0.02, 0.02), Level 2 again at S/N 1000 (its noise 22x lower: what
# each estimator does with almost no pixel noise), and in the misspecified case of
# results/validation/misspecified_sersic/ (GalSim-drawn Sersic n = 2 data, exponential
# model) with its control (GalSim-drawn exponential); then Level 0 with one setting
# changed each (the cell: 50, 96, 128 px; the grid: +-0.01, +-0.04). Each campaign's
# results/validation/anacal/<name>/validation.json, bias_results.json and printed.txt are
# written by bench/validate_anacal.py (run -> extract -> stats through the real CLI).
#   bash results/validation/anacal/run.sh [names...]      (default: all, in this order)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
S=results/validation/misspecified_sersic
GRID2=(--grid 0.02 --grid-g2 -0.02 0.02)  # paired configs: +-g1 from the pair
run() { rm -rf "/tmp/anacal_$1"; $PY bench/validate_anacal.py --name "anacal/$1" --work "/tmp/anacal_$1" "${@:2}"; }
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(level2_2d level2_snr1000 level0 level1 control sersic2 level0_cell50 level0_cell96 level0_cell128 level0_g01 level0_g04)
for n in "${names[@]}"; do
  case $n in
    level2_2d) run level2_2d --config configs/level2.yaml "${GRID2[@]}" --n 2400 --batch-size 32 --requirement lsst-project ;;
    level2_snr1000) run level2_snr1000 --config configs/level2.yaml "${GRID2[@]}" --n 300 --batch-size 32 --requirement lsst-project --set image.noise.snr=1000 ;;
    level0) run level0 --config configs/level0.yaml --grid -0.02 0.02 --grid-g2 -0.02 0.02 --n 500 ;;
    level0_cell50|level0_cell96|level0_cell128)  # the cell scan: one size each
      run $n --config configs/level0.yaml --grid -0.02 0.02 --grid-g2 -0.02 0.02 --n 500 --set "inference.anacal_config.cell_size=${n#level0_cell}" ;;
    level0_g01) run level0_g01 --config configs/level0.yaml --grid -0.01 0.01 --grid-g2 -0.01 0.01 --n 500 ;;
    level0_g04) run level0_g04 --config configs/level0.yaml --grid -0.04 0.04 --grid-g2 -0.04 0.04 --n 500 ;;
    level1) run level1 --config configs/level1.yaml --set inference.method=map "${GRID2[@]}" --n 40 ;;
    control) run control --config $S/control.yaml --grid 0.02 --n 300 --batch-size 30 ;;
    sersic2) run sersic2 --config $S/sersic2.yaml --grid 0.02 --n 300 --batch-size 30 ;;
    *) echo "unknown campaign $n" >&2; exit 2 ;;
  esac
done
