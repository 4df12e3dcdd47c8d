#!/usr/bin/env bash
# Build a base image whose `uvx` runs Harbor's verifier template offline, for sites whose
# sandboxes have no internet. Harbor's published test.sh installs curl, downloads uv from
# astral.sh and runs `uvx --with pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest …`:
# without a network every step of that fails. This image (FROM the local Debian base of
# deploy/build-debian-base.sh) has curl, python3 and uv installed, and the wheels uvx asks
# for in /opt/wheels, with uv told to stay offline and take them from there
# (UV_OFFLINE, UV_FIND_LINKS), so the template's own uvx line runs unchanged. Map the bases
# tasks name to it:
#
#   OPENFORGE_BASE_IMAGES="ubuntu:24.04=localhost/openforge-debian-uv:bookworm"
#
#   deploy/build-uv-base.sh [IMAGE] [ENGINE] [BASE] [REQUIREMENT ...]
#   (defaults: localhost/openforge-debian-uv:bookworm podman localhost/openforge-debian:bookworm
#    uv==0.9.7 pytest==8.4.1 pytest-json-ctrf==0.3.5)
#
# The wheels are downloaded on this host with pip (its index and certificates), not inside
# the build, whose network may reach the Debian mirror only.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-localhost/openforge-debian-uv:bookworm}
ENGINE=${2:-podman}
BASE=${3:-localhost/openforge-debian:bookworm}
shift $(( $# < 3 ? $# : 3 ))
REQS=("$@")
[ ${#REQS[@]} -gt 0 ] || REQS=(uv==0.9.7 pytest==8.4.1 pytest-json-ctrf==0.3.5)
PIP=${PIP:-.venv/bin/pip}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The base's Python (Debian bookworm: 3.11) on x86-64 decides which wheels fit.
"$PIP" download -q -d "$WORK/wheels" --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any "${REQS[@]}"
UV=$(printf '%s\n' "${REQS[@]}" | grep -E '^uv([=<>!~ ]|$)' | head -1)
WITH=$(printf '%s\n' "${REQS[@]}" | grep -vE '^uv([=<>!~ ]|$)' | sed 's/^/--with /' | tr '\n' ' ')
cat > "$WORK/Dockerfile" <<DOCKERFILE
FROM $BASE
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates python3 \\
      python3-pip && rm -rf /var/lib/apt/lists/*
COPY wheels /opt/wheels
RUN pip install --break-system-packages --no-index --find-links /opt/wheels ${UV:-uv}
ENV UV_OFFLINE=1 UV_FIND_LINKS=/opt/wheels UV_PYTHON_DOWNLOADS=never UV_CACHE_DIR=/opt/uv-cache
# Resolve once at build time so the first verifier does not; any user may use the cache.
RUN uvx $WITH pytest --version && chmod -R a+rwX /opt/uv-cache
DOCKERFILE
"$ENGINE" build -q -t "$IMAGE" "$WORK" >/dev/null
echo "$IMAGE"
