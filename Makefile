# ember — the two commands in the README.
#   make demo   set up, then run the main job (see README)
#   make test   set up, then the checks of `make lint`, then the whole test suite
#   make lint   the layering contracts (import-linter), lint and import order (ruff), types (mypy)
PYTHON := .venv/bin/python
VENV_BIN := .venv/bin

.PHONY: setup demo lint test bench

setup:
	@bash scripts/setup.sh

demo: setup
	cd jobs && ../$(PYTHON) clickstream_demo.py --data ../data/demo

lint: setup
	$(VENV_BIN)/lint-imports
	$(VENV_BIN)/ruff check platform tests jobs bench
	$(VENV_BIN)/mypy

test: lint
	$(PYTHON) -m pytest -q -p no:cacheprovider

bench: setup
	$(PYTHON) bench/log_bench.py
