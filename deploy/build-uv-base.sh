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
# Terminal-Bench 1's template (run-tests.sh, or tests/setup-uv-pytest.sh + run-uv-pytest.sh)
# runs `apt-get install curl; curl astral.sh/uv/install.sh | sh; source $HOME/.local/bin/env;
# uv init; uv add pytest[==8.4.1]; uv run pytest …`. Offline the first two fail harmlessly
# (curl is here, an empty pipe runs nothing); the image has the env file the installer would
# have written, so the `source` passes under `set -e`; and `uv add` locks for every
# platform, so the wheels of dependencies other platforms and Pythons need are here too
# (pytest's colorama, Windows-only; exceptiongroup and tomli, before 3.11). pip is pointed at the same wheels (offline, allowed
# to install into the system Python), so `pip install pytest` templates run as well.
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
# uv's universal lock wants the dependencies pip skipped for this platform (a marker such as
# sys_platform == "win32"; extras aside): read them from the wheels' metadata and fetch them
# (pure wheels), until nothing new is named.
MARKED=$WORK/marked.txt
for _ in 1 2 3; do
  python3 - "$WORK/wheels" > "$MARKED" <<'PY'
import re, sys, zipfile
from pathlib import Path
have = {re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower() for w in Path(sys.argv[1]).glob("*.whl")}
for wheel in Path(sys.argv[1]).glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:") and ";" in line and "extra" not in line:
                req = line.split(":", 1)[1].split(";")[0].strip()
                name = re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~\[(]", req)[0]).lower()
                if name not in have:
                    print(req.replace(" ", ""))
PY
  [ -s "$MARKED" ] || break
  "$PIP" download -q -d "$WORK/wheels" --only-binary=:all: --no-deps --platform any \
    --python-version 3.11 -r "$MARKED"
done
WITH=$(printf '%s\n' "${REQS[@]}" | grep -vE '^uv([=<>!~ ]|$)' | sed 's/^/--with /' | tr '\n' ' ')
cat > "$WORK/Dockerfile" <<DOCKERFILE
FROM $BASE
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates python3 \\
      python3-pip && rm -rf /var/lib/apt/lists/*
COPY wheels /opt/wheels
RUN pip install --break-system-packages --no-index --find-links /opt/wheels ${UV:-uv}
ENV UV_OFFLINE=1 UV_FIND_LINKS=/opt/wheels UV_PYTHON_DOWNLOADS=never UV_CACHE_DIR=/opt/uv-cache \
    PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/wheels PIP_BREAK_SYSTEM_PACKAGES=1
# What uv's installer leaves for `source \$HOME/.local/bin/env`: ~/.local/bin on PATH.
RUN mkdir -p /root/.local/bin && printf '%s\n' 'case ":\$PATH:" in *":\$HOME/.local/bin:"*) ;;' \
      '  *) export PATH="\$HOME/.local/bin:\$PATH" ;; esac' > /root/.local/bin/env
# Resolve once at build time so the first verifier does not; any user may use the cache.
RUN uvx $WITH pytest --version && chmod -R a+rwX /opt/uv-cache
DOCKERFILE
"$ENGINE" build -q -t "$IMAGE" "$WORK" >/dev/null
echo "$IMAGE"
