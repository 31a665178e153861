#!/usr/bin/env bash
# The GPU check of issue 33 (item 5) as ONE prepared command, for a GPU node without
# network (Python 3.12, JAX with its CUDA plugin, numpyro, xarray, ... preinstalled; see
# ../shared/gpu/README.md). Run in the repository root of a copy of the tree that carries
# .whl/ (the missing packages as wheels: pydantic, netCDF4, cftime, arviz, h5netcdf, ...):
#
#   SHEARBATCH_GIT_COMMIT=<commit of the tree> bash ci/gpu_check.sh [bench_gpu.py options]
#
# (e.g. --quick; on a machine without a GPU, to try the script itself:
#  SHEARBATCH_REQUIRE_GPU=0 bash ci/gpu_check.sh --cpu-smoke: the tests then skip.)
#
# 1. installs .whl/*.whl into /tmp/site (no index, no deps) and puts it, src/ and bench/ on
#    PYTHONPATH (the console scripts are not installed: python -m shearbatch run|extract|stats);
# 2. prints nvidia-smi, JAX's devices and the device's memory;
# 3. bench/bench_gpu.py (the GPU record, written straight to $OUT/gpu.json + gpu.png: copy
#    them to results/benchmarks/ to commit them), under `timeout` (its steps have their
#    own, inside a budget);
# 4. the gpu test tier, pytest -m gpu tests/gpu -rs, under `timeout`, with
#    SHEARBATCH_REQUIRE_GPU=1 (no GPU is a failure there, not a skip).
# Writes into $OUT (set by the device tool; default /tmp/gpu_check_out): gpu_check.log (all
# of the output), bench_gpu.log (every bench step's output), pytest_gpu.log, gpu.json,
# gpu.png, and gpu.json.partial (what the bench had when it was stopped, if it was).
# Wall: at most about 8.5 minutes (timeouts: 60 s install, 60 s probe, 250 s bench, then the
# tests get what is left of 500 s, 150 to 260 s); typically 6-7 minutes.
# Exit status: 0 both passed; else 10 x (bench failed) + (tests failed); 9 no install.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
T0=$SECONDS
say() { echo "[gpu_check +$((SECONDS - T0)) s] $*"; }
. ci/gpu_common.sh

main() {

say "python: $($PY --version 2>&1) at $(command -v "$PY"); tree: ${SHEARBATCH_GIT_COMMIT:-commit not given}"
gpu_install_wheels || exit 9
export PYTHONPATH=$PWD/src:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 SHEARBATCH_REQUIRE_GPU=${SHEARBATCH_REQUIRE_GPU:-1}
unset JAX_PLATFORMS XLA_PYTHON_CLIENT_PREALLOCATE SHEARBATCH_MEMORY_BUDGET

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv 2>&1 || true
gpu_probe 60 || say "JAX probe failed (exit $?)"

# 250 s on a GPU; --cpu-smoke (the script tried on a CPU, not timed for a GPU's budget)
# takes ~5 minutes on the 2-core CPU, so it gets 1500 s
t_bench=250
case " $* " in *" --cpu-smoke "*) t_bench=1500 ;; esac
say "bench/bench_gpu.py $* (timeout $t_bench s)"
timeout -k 10 "$t_bench" "$PY" bench/bench_gpu.py --log "$OUT/bench_gpu.log" --out "$OUT/gpu.json" "$@"
rc_bench=$?
say "bench exit $rc_bench"

left=$(( 500 - (SECONDS - T0) )); left=$(( left > 260 ? 260 : (left < 150 ? 150 : left) ))
export SHEARBATCH_GPU_TEST_TIMEOUT=${SHEARBATCH_GPU_TEST_TIMEOUT:-$(( left - 30 ))}  # per campaign
say "pytest -m gpu tests/gpu (timeout $left s)"
timeout -k 10 "$left" "$PY" -m pytest -q -m gpu tests/gpu -rs -s -p no:cacheprovider --durations=10 \
  2>&1 | tee "$OUT/pytest_gpu.log"
rc_test=${PIPESTATUS[0]}
say "tests exit $rc_test; bench exit $rc_bench; files in \$OUT: $(ls "$OUT" | tr '\n' ' ')"
return $(( (rc_bench != 0) * 10 + (rc_test != 0) ))
}

main "$@" 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
