# Quick start: `make demo` (a small Level 0 campaign) and `make test` (the test suite).
# Both create the virtual environment and install what they need on a fresh machine.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= results/demo

.PHONY: demo test test-slow lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# A small Level 0 campaign: 4 shears x 20 seeds (enough for the coverage gates), MAP + Laplace
# in float64 (the config's precision),
# then the summary table, then m and c with errors, coverage, plots and the verdict.
demo: $(VENV)/.installed
	$(BIN)/bias-run --config configs/level0.yaml --shear-grid -0.05 -0.02 0.02 0.05 \
	    --g2-true 0.0 --n-realizations 20 --base-seed 0 --batch-size 40 \
	    --output-dir $(OUT)/runs --preview $(OUT)/stamps.png --no-progress
	@echo "realization directories under $(OUT)/runs:"
	@ls $(OUT)/runs | column -c 100
	$(BIN)/bias-extract --input-dir $(OUT)/runs --output $(OUT)/summary.csv --no-progress
	$(BIN)/bias-stats --input $(OUT)/summary.csv --output-dir $(OUT)/stats --level level_0 \
	    --posterior-dir $(OUT)/runs

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n 2 --dist loadfile -q --durations=15

# the long statistical tier (not run by `make test` / CI)
test-slow: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n 2 --dist loadfile -q -m slow --durations=15

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

clean:
	rm -rf $(VENV) results/demo
