# Quick start: `make demo` (a small Level 0 campaign) and `make test` (the test suite).
# Both create the virtual environment and install what they need on a fresh machine.
# `make help` lists every target.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= results/demo
# the tested dependency versions (`make constraints` refreshes them); `make CONSTRAINTS= demo`
# installs the newest versions pyproject.toml allows instead
CONSTRAINTS ?= constraints.txt
PIN    := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)

.PHONY: help demo test test-slow test-slurm test-gpu gpu-session test-min test-gpu-image check-extras lint docs constraints clean

help:  ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(PIN) -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(CONSTRAINTS) $(VENV)/.installed
	$(BIN)/python -m pip install --quiet $(PIN) -e '.[test,anacal]'
	touch $@

$(VENV)/.installed-docs: pyproject.toml $(CONSTRAINTS) $(VENV)/.installed
	$(BIN)/python -m pip install --quiet $(PIN) -e '.[docs]'
	touch $@

# A small Level 0 campaign on a two-dimensional shear grid (every (g1, g2) pair of
# -0.05, 0.05: m1, c1, m2 and c2 are all measured), 20 seeds per point (enough for the
# coverage gates), MAP + Laplace in float64 (the config's precision), then the summary
# table, then m and c with errors, coverage, plots, the verdict and report.html (one file to
# send to a colleague).
demo: $(VENV)/.installed  ## set-up + a small 2-D Level 0 campaign (run -> extract -> stats -> report.html)
	$(BIN)/bias-run --config configs/level0.yaml --shear-grid -0.05 0.05 \
	    --shear-grid-g2 -0.05 0.05 --n-realizations 20 --base-seed 0 --batch-size 40 \
	    --output-dir $(OUT)/runs --preview $(OUT)/stamps.png --no-progress
	@echo "realization directories under $(OUT)/runs:"
	@ls $(OUT)/runs | column -c 100
	$(BIN)/bias-extract --input-dir $(OUT)/runs --output $(OUT)/summary.csv --no-progress
	$(BIN)/bias-stats --input $(OUT)/summary.csv --output-dir $(OUT)/stats --level level_0 \
	    --posterior-dir $(OUT)/runs --report $(OUT)/report.html

test: $(VENV)/.installed-test  ## set-up + the default test tier (tens of minutes on 2 cores; README.md "Tests")
	$(BIN)/python -m pytest -n 2 --dist loadfile -q --durations=15

# the long statistical tier (not run by `make test` / CI)
test-slow: $(VENV)/.installed-test  ## the long statistical tier (pytest -m slow)
	$(BIN)/python -m pytest -n 2 --dist loadfile -q -m slow --durations=15

# the `slurm` tier: a campaign submitted to a running SLURM (`make test` deselects it; here
# it is skipped, with the reason, when sbatch is absent). .ci/run starts a single-node
# SLURM for it (ci/start_slurm.sh, root) and stops it afterwards.
test-slurm: $(VENV)/.installed-test  ## the SLURM tier (pytest -m slurm; skipped without sbatch)
	PATH=/usr/sbin:$$PATH $(BIN)/python -m pytest -q -m slurm -rs --durations=5

# the `gpu` tier (tests/gpu/): small campaigns at each level on the GPU against the CPU, the
# memory guard, bias-stats on a GPU node (`make test` deselects it; skipped, with the reason,
# where JAX sees no GPU). On a node without network: ci/gpu_check.sh (carried wheels).
test-gpu: $(VENV)/.installed-test  ## the GPU tier (pytest -m gpu; skipped without a GPU)
	$(BIN)/python -m pytest -q -m gpu tests/gpu -rs --durations=10

# Everything a lent GPU should measure, as one command within 8 minutes of device time
# (ci/gpu_session.sh): the gpu tier (Level 2 at the batch --batch-size auto picks against
# the CPU included), then bench/bench_field.py (Level 2 as users run it: galaxies/s of warm
# batches, lockstep efficiency, host fraction, cold start, m, c and ESS), written to
# results/benchmarks/gpu_session/ ($$OUT under the device tool). `make gpu-session
# ARGS=--cpu-smoke` runs the same steps on the CPU at tiny sizes into a temporary directory.
gpu-session: $(VENV)/.installed-test  ## the gpu tier + Level 2 figures, one script, <= 8 min on a GPU
	PYTHON=$(BIN)/python bash ci/gpu_session.sh $(ARGS)

# The versions tier (issue 55): every stage, cheaply, in the two environments besides
# constraints.txt's: bias-run / bias-extract / bias-stats at Level 0 (also as python -m
# shearbatch), Level 2 (the shipped config's interim campaign shrunk to 4 galaxies: one
# compile, ~1.5 min), the Python API, the report, a large summary.csv of mixed complete
# and unfinished rows read in pandas' chunks. Existing end-to-end tests named here (a
# marker would mean editing them across the suite). -p arviz imports arviz and matplotlib
# at start-up, where their import-time warnings (arviz's once-a-day FutureWarning) are
# shown rather than raised inside a test that turns every warning into an error
# (test_api's describe test).
VERSIONS_TIER := tests/cli/test_main_module.py tests/top/test_api.py \
    tests/top/test_api_cli_agreement.py \
    tests/cli/test_pipeline_cli.py::test_level0_campaign_passes_acceptance \
    tests/cli/test_pipeline_cli.py::test_one_command_from_a_campaign_directory_to_a_report \
    tests/analysis/test_report.py tests/analysis/test_summary_chunks.py \
    tests/engine/test_estimator_draws.py
VERSIONS_PYTEST := -q -p no:cacheprovider -p arviz -n 2 --dist loadfile -rs --durations=5
MIN_VENV       ?= .venv-min
GPU_IMAGE_VENV ?= .venv-gpu-image
# At the lower bounds two old wheels warn where the tested stack does not, and pytest's
# "error" filter would fail on it: netCDF4 1.6.1 (to at least 1.7.2) says "numpy.ndarray
# size changed" at import (numpy itself silences it for users), and matplotlib < 3.10.8
# calls pyparsing names that pyparsing 3.3 deprecates (hidden from users by default)
MIN_WARNINGS := -W "ignore:numpy.ndarray size changed:RuntimeWarning" \
    -W ignore::pyparsing.warnings.PyparsingDeprecationWarning

# The oldest versions pyproject.toml allows (ci/constraints-min.txt: every runtime
# dependency at its lower bound, generated by ci/min_constraints.py; the resolver picks the
# rest, as for a user) on Python 3.11, the oldest requires-python. Its own venv, rebuilt
# from scratch when pyproject.toml or the pins change. Measured on the shared 2-core CPU
# (others' jobs running): 1.8 min install, then the tier 6.2 min with a cold compilation
# cache (3.1 min warm).
$(MIN_VENV)/.installed: pyproject.toml ci/constraints-min.txt
	$(PYTHON) ci/min_constraints.py --check
	rm -rf $(MIN_VENV)
	py=$$(ci/find_python.sh 3.11) && $$py -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet -c ci/constraints-min.txt -e . pytest pytest-xdist
	touch $@

test-min: $(MIN_VENV)/.installed  ## the versions tier at pyproject's lower bounds (.venv-min, Python 3.11)
	$(MIN_VENV)/bin/python -m pytest $(VERSIONS_PYTEST) $(MIN_WARNINGS) $(VERSIONS_TIER)

# The GPU node image's stack on the CPU (ci/constraints-gpu-image.txt: the image's jax
# 0.11.2, jaxlib, numpyro 0.21.0, numpy 2.5.2 and pandas 3.0.6, FIXED BY DESIGN in
# ci/gpu_image_constraints.py; everything else at constraints.txt's versions) on Python
# 3.12: the JAX program the GPU runs, on another backend. Measured as test-min: 1.9 min
# install, the tier 6.5 min cold (3.0 min warm; 4.8 CPU-minutes in all).
$(GPU_IMAGE_VENV)/.installed: pyproject.toml ci/constraints-gpu-image.txt
	$(PYTHON) ci/gpu_image_constraints.py --check
	rm -rf $(GPU_IMAGE_VENV)
	py=$$(ci/find_python.sh 3.12) && $$py -m venv $(GPU_IMAGE_VENV)
	$(GPU_IMAGE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GPU_IMAGE_VENV)/bin/python -m pip install --quiet -c ci/constraints-gpu-image.txt -e . pytest pytest-xdist
	touch $@

test-gpu-image: $(GPU_IMAGE_VENV)/.installed  ## the versions tier on the GPU image's stack, on the CPU (Python 3.12, jax 0.11)
	$(GPU_IMAGE_VENV)/bin/python -m pytest $(VERSIONS_PYTEST) $(VERSIONS_TIER)

# pip resolves the GPU extras without a GPU (ci/check_extras.py: pip install --dry-run
# --report, nothing installed; needs PyPI, so a step of .ci/run and not a unit test):
# .[cuda12] and .[cuda13] at constraints.txt's jax, .[cuda13] at the GPU image's. ~2 min.
check-extras: $(VENV)/.installed $(GPU_IMAGE_VENV)/.installed  ## pip resolves .[cuda12] and .[cuda13] (dry run; needs PyPI)
	$(BIN)/python ci/check_extras.py --python $(BIN)/python -c constraints.txt cuda12 cuda13
	$(BIN)/python ci/check_extras.py --python $(GPU_IMAGE_VENV)/bin/python \
	    -c ci/constraints-gpu-image.txt cuda13

lint: $(VENV)/.installed-test  ## ruff check + format check
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# The documentation site (Sphinx + MyST Markdown, furo; API reference from the docstrings):
# docs/*.md, the generated docs/config.md and every docs/results/*.md; warnings are errors.
docs: $(VENV)/.installed-docs  ## set-up + the documentation site, warnings as errors (docs/_build/html)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

# Re-resolve the newest versions pyproject.toml allows into a scratch venv and record them,
# then the other environments' pins: ci/constraints-min.txt (pyproject's lower bounds, by
# ci/min_constraints.py) and ci/constraints-gpu-image.txt (by ci/gpu_image_constraints.py:
# the GPU image's jax, jaxlib, numpyro, numpy and pandas are FIXED BY DESIGN, the image's
# versions, changed there only when the image changes; every other package from the new
# constraints.txt). Then run make test, test-min, test-gpu-image and docs; commit if they pass.
constraints:  ## refresh constraints.txt and the min / GPU-image pins derived from it
	rm -rf .venv-constraints
	$(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet --upgrade pip
	.venv-constraints/bin/python -m pip install --quiet -e '.[test,docs,anacal]'
	( echo "# Tested versions: pip install -c constraints.txt -e '.[test]' (what make uses; '.[docs]' for make docs)."; \
	  echo "# Refresh: make constraints, then make test and make docs; commit if they pass."; \
	  .venv-constraints/bin/python -m pip freeze --exclude-editable ) > constraints.txt
	rm -rf .venv-constraints
	$(PYTHON) ci/min_constraints.py
	$(PYTHON) ci/gpu_image_constraints.py

clean:  ## remove .venv (and .venv-min, .venv-gpu-image), results/demo and the built docs
	rm -rf $(VENV) $(MIN_VENV) $(GPU_IMAGE_VENV) results/demo docs/_build
