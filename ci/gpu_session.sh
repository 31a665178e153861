#!/usr/bin/env bash
# Everything a lent GPU should measure (issue 54 item 4), as ONE prepared command that fits
# 8 minutes of device time: the gpu test tier, then a Level 2 campaign as users run it.
#
#   SHEARBATCH_GIT_COMMIT=<commit> bash ci/gpu_session.sh [--out DIR]   # on the GPU node
#   PYTHON=.venv/bin/python bash ci/gpu_session.sh --cpu-smoke          # anywhere: the plumbing
#
# Steps, each under its own `timeout` (GPU mode; typical times are estimates from the H100
# runs of results/benchmarks/, not yet measured with this script):
# 0. (<= 60 s, ~5 s) .whl/*.whl into /tmp/site when the tree carries them (a node without
#    network: ../shared/gpu/README.md); src/ and bench/ on PYTHONPATH;
# 1. (<= 45 s, ~10 s) nvidia-smi and JAX's devices;
# 2. (<= 260 s less what 0 and 1 took, ~3-4 min) the gpu tier, `pytest -m gpu tests/gpu -rs -s`, with
#    SHEARBATCH_REQUIRE_GPU=1 (no GPU is a failure, not a skip): Level 0/1/2 on the GPU
#    against the CPU, the memory guard, bias-stats on a GPU node, and Level 2 at the batch
#    `--batch-size auto` picks on this GPU (4,100 realizations) against 8 of its seeds on the
#    CPU (tests/gpu/test_gpu_tier.py, (d));
# 3. (what is left of 460 s, at least 190 s; ~2-2.5 min) bench/bench_field.py --skip-l0:
#    Level 2 on the 2-D grid, 256 seeds x 8 images of 32 galaxies at batch 512 (4 batches:
#    the cold start to batch 1, then 3 warm ones; 65,536 galaxies), stopped 90 s before the
#    step's budget ends if it has not ended, so that they still run: bias-extract and bias-stats
#    --requirement lsst-project. Its record, field.json, holds the figures ("headline":
#    galaxies/s of the warm batches, lockstep efficiency, host fraction, cold start to
#    batch 1, m and c with errors, the importance weights' ESS), printed at the end.
#
# Writes into --out DIR (default: $OUT where the device tool sets it, else
# results/benchmarks/gpu_session/; with --cpu-smoke a new temporary directory, never the
# committed records) at most 8 files (what the device tool brings back): session.log (all
# of the output, the tier's included), field.json, field.png, field.log, bias_results.json,
# residuals.png, coverage.png, summary_compact.csv.gz.
#
# --cpu-smoke: the same steps on the CPU at tiny sizes (JAX_PLATFORMS=cpu,
# SHEARBATCH_GPU_TIER_ON_CPU=1, (d) on 2 seeds, bench_field.py --cpu-smoke at batch 4: 4
# batches of 4 realizations of 4 galaxies), no time budget; it proves nothing about a GPU.
# On the 2-core development CPU: ~13 minutes (the tier 10, the bench 2.5).
# --pytest-k EXPR: only the tier's tests that EXPR selects (pytest -k).
#
# Exit status: 0 both steps passed; else 10 x (bench failed) + (tier failed); 1 no GPU
# (without --cpu-smoke: nothing run); 2 bad arguments; 9 the wheels did not install.
set -uo pipefail
cd "$(dirname "$0")/.."
SMOKE=0 DIR="" KEXPR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) SMOKE=1 ;;
    --out) DIR=${2:?--out needs a directory}; shift ;;
    --out=*) DIR=${1#--out=} ;;
    --pytest-k) KEXPR=${2:?--pytest-k needs an expression}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_session.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$DIR" ]; then
  if [ "$SMOKE" = 1 ]; then DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu_session_smoke.XXXXXX")
  else DIR=${OUT:-results/benchmarks/gpu_session}; fi
fi
mkdir -p "$DIR" || exit 2
DIR=$(cd "$DIR" && pwd)
PY=${PYTHON:-python3}
T0=$SECONDS
TOTAL=460  # s: the steps' limits together (the bench's kill margin included: <= 475 s)
say() { echo "[gpu_session +$((SECONDS - T0)) s] $*"; }
. ci/gpu_common.sh

main() {
say "python: $($PY --version 2>&1) at $(command -v "$PY"); tree: ${SHEARBATCH_GIT_COMMIT:-commit not given}; out: $DIR; mode: $([ "$SMOKE" = 1 ] && echo cpu-smoke || echo gpu)"
gpu_install_wheels || return 9
export PYTHONPATH=$PWD/src:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
unset XLA_PYTHON_CLIENT_PREALLOCATE SHEARBATCH_MEMORY_BUDGET SHEARBATCH_CACHE_DIR
if [ "$SMOKE" = 1 ]; then
  export JAX_PLATFORMS=cpu SHEARBATCH_GPU_TIER_ON_CPU=1 SHEARBATCH_REQUIRE_GPU=0
  export SHEARBATCH_GPU_AUTO_REALIZATIONS=${SHEARBATCH_GPU_AUTO_REALIZATIONS:-2}
  export SHEARBATCH_GPU_TEST_TIMEOUT=${SHEARBATCH_GPU_TEST_TIMEOUT:-2400}
  t_probe=600 t_tier=3000
else
  unset JAX_PLATFORMS SHEARBATCH_GPU_TIER_ON_CPU SHEARBATCH_GPU_AUTO_REALIZATIONS
  export SHEARBATCH_REQUIRE_GPU=1
  t_probe=45
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv 2>&1 || true
fi

gpu_probe "$t_probe" | tee "$DIR/.probe" || say "JAX probe failed (exit $?)"
backend=$(sed -n 's/.* backend \([a-z]*\).*/\1/p' "$DIR/.probe"); rm -f "$DIR/.probe"
if [ "$SMOKE" = 0 ] && [ "$backend" != gpu ]; then
  say "no GPU here (JAX's backend: ${backend:-unknown}): nothing run; --cpu-smoke tries the steps"
  return 1
fi

if [ "$SMOKE" = 0 ]; then
  t_tier=$(( TOTAL - 200 - (SECONDS - T0) ))  # ~245 s: at least 200 s are left for the bench
  export SHEARBATCH_GPU_TEST_TIMEOUT=${SHEARBATCH_GPU_TEST_TIMEOUT:-$((t_tier - 40))}  # per campaign
fi
say "step 2: pytest -m gpu tests/gpu (timeout $t_tier s; $SHEARBATCH_GPU_TEST_TIMEOUT s per campaign)"
timeout -k 10 "$t_tier" "$PY" -m pytest -q -m gpu tests/gpu -rs -s -p no:cacheprovider \
  --durations=10 ${KEXPR:+-k "$KEXPR"}
rc_tier=$?
say "tier exit $rc_tier"

if [ "$SMOKE" = 1 ]; then
  budget=3000
  field=(--cpu-smoke --l2-batch 4 --l2-time-limit none)
else
  budget=$(( TOTAL - (SECONDS - T0) ))
  # no --time-limit: bias-run would start batch 2 only if 1.5x batch 1 (compile included)
  # fitted; the campaign is sized to end in ~1.5 min, and is stopped 90 s before the budget's
  # end whatever happens, so that extract and stats run on what it wrote
  field=(--l2-seeds 256 --l2-batch 512 --l2-time-limit none --stats-reserve-s 90)
fi
say "step 3: bench/bench_field.py --skip-l0 ${field[*]} (budget $budget s)"
timeout -k 5 $(( budget + 10 )) "$PY" bench/bench_field.py --out "$DIR" --skip-l0 \
  --budget-s "$budget" "${field[@]}"
rc_bench=$?
say "bench exit $rc_bench"
if [ -f "$DIR/field.json" ]; then
  "$PY" - "$DIR/field.json" <<'EOF' || true
import json, sys
rec = json.load(open(sys.argv[1]))
for k, v in (rec.get("headline") or {"headline": "missing (the bench did not end)"}).items():
    print(f"  {k}: {v}")
EOF
fi
say "tier exit $rc_tier; bench exit $rc_bench; files in $DIR: $(ls "$DIR" | tr '\n' ' ')"
return $(( (rc_bench != 0) * 10 + (rc_tier != 0) ))
}

# one line: bash has read it whole before main runs (an edit of this file meanwhile is harmless)
main 2>&1 | tee "$DIR/session.log"; exit "${PIPESTATUS[0]}"
