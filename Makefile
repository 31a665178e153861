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

.PHONY: help demo test test-slow test-slurm test-gpu gpu-session lint docs constraints clean

help:  ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

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

test: $(VENV)/.installed-test  ## set-up + the default test tier (~4 min on 2 cores, warm cache)
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

lint: $(VENV)/.installed-test  ## ruff check + format check
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# The documentation site (Sphinx + MyST Markdown, furo; API reference from the docstrings):
# docs/*.md, the generated docs/config.md and every docs/results/*.md; warnings are errors.
docs: $(VENV)/.installed-docs  ## set-up + the documentation site, warnings as errors (docs/_build/html)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

# Re-resolve the newest versions pyproject.toml allows into a scratch venv and record them
# (then run `make test` and commit constraints.txt if it passes).
constraints:  ## refresh constraints.txt from a fresh resolve of pyproject.toml
	rm -rf .venv-constraints
	$(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet --upgrade pip
	.venv-constraints/bin/python -m pip install --quiet -e '.[test,docs,anacal]'
	( echo "# Tested versions: pip install -c constraints.txt -e '.[test]' (what make uses; '.[docs]' for make docs)."; \
	  echo "# Refresh: make constraints, then make test and make docs; commit if they pass."; \
	  .venv-constraints/bin/python -m pip freeze --exclude-editable ) > constraints.txt
	rm -rf .venv-constraints

clean:  ## remove .venv, results/demo and the built docs
	rm -rf $(VENV) results/demo docs/_build
