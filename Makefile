.PHONY: quickstart test bench lint

VENV ?= .venv
PY := $(VENV)/bin/python

quickstart:
	$(VENV)/bin/openforge quickstart

test:
	$(PY) -m pytest -q

bench:
	$(PY) bench/gateway.py
	$(PY) bench/traces.py
	$(PY) bench/rollouts.py
	$(PY) bench/engine_local.py
	$(PY) bench/trainer.py

lint:
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
