# ember — the two commands in the README.
#   make demo   set up, then run the main job (see README)
#   make test   set up, then run the whole test suite
PYTHON := .venv/bin/python

.PHONY: setup demo test bench

setup:
	@bash scripts/setup.sh

demo: setup
	cd jobs && ../$(PYTHON) clickstream_demo.py --data ../data/demo

test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider

bench: setup
	$(PYTHON) bench/log_bench.py
