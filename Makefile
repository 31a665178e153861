# Quick start: `make demo` (a small Level 0 campaign) and `make test` (the test suite).
# Both create the virtual environment and install what they need on a fresh machine.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= results/demo
export SHEARBATCH_CACHE_DIR ?= $(CURDIR)/.cache/jax

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/bias-run --config configs/level0.yaml --shear-grid -0.05 -0.02 0.02 0.05 \
	    --g2-true 0.0 --n-realizations 4 --base-seed 0 --batch-size 16 --x64 \
	    --output-dir $(OUT) --no-progress
	@echo "realization directories under $(OUT):"
	@ls -1 $(OUT)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n 2 --dist loadfile -q

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

clean:
	rm -rf $(VENV) .cache results/demo
