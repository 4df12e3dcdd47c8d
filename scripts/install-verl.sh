#!/usr/bin/env bash
# A second environment, .venv-verl, with veRL 0.9.1 (the version the bridge is pinned to)
# beside OpenForge: veRL pins its own transformers, so it does not share .venv. The tests
# of the veRL export and agent-loop bridge run in it (CPU is enough).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-verl/bin/python ] || python3 -m venv .venv-verl
if ! .venv-verl/bin/python -c 'import verl, openforge; assert verl.__version__ == "0.9.1"' 2>/dev/null; then
  .venv-verl/bin/pip install -q --upgrade pip
  # veRL 0.9.1's agent loop imports cachetools, fastapi and uvicorn without declaring them.
  .venv-verl/bin/pip install -q "torch==2.13.0" "verl==0.9.1" cachetools fastapi uvicorn -e '.[dev]'
fi
