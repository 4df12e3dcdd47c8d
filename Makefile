.PHONY: quickstart test bench lint setup

VENV ?= .venv
PY := $(VENV)/bin/python
SETUP := $(VENV)/.setup-done

# A fresh machine is set up on first use; `make setup` redoes it.
$(SETUP): pyproject.toml scripts/setup.sh scripts/install-harnesses.sh scripts/install-verl.sh \
		scripts/install-vllm.sh scripts/install-environments.sh
	bash scripts/setup.sh
	touch $@

setup:
	bash scripts/setup.sh
	touch $(SETUP)

quickstart: $(SETUP)
	$(VENV)/bin/openforge quickstart

# The veRL export and bridge tests run again in .venv-verl, where veRL itself imports.
# --durations: CI's log names the slowest tests (the whole run must stay under 30 minutes).
test: $(SETUP)
	$(PY) -m pytest -q --durations=25
	.venv-verl/bin/python -m pytest -q -p no:cacheprovider tests/integrations tests/traces/test_verl.py

bench: $(SETUP)
	$(PY) bench/gateway.py
	$(PY) bench/gateway.py --only headline --mode stream --conc 256 --think-ms 500 --no-peer
	$(PY) bench/gateway_heap.py --quick
	$(PY) bench/gateway_huge.py
	$(PY) bench/rendering.py
	$(PY) bench/traces.py
	$(PY) bench/rollouts.py
	$(PY) bench/engine_local.py
	$(PY) bench/engine_prefix.py
	$(PY) bench/engine_vllm_live.py
	$(PY) bench/trainer.py
	$(PY) bench/learning.py --quick

lint: $(SETUP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy
