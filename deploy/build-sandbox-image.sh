#!/usr/bin/env bash
# Build the sandbox image offline: no registry is reachable, so the base is a rootfs
# assembled from this (Debian) host's own packages, then `podman build` of
# deploy/Containerfile.sandbox (FROM scratch + that rootfs + sandboxd's Python deps).
#
#   deploy/build-sandbox-image.sh [IMAGE] [ENGINE]     (defaults: openforge-sandbox:latest podman)
#
# The image holds: dash/bash, coreutils, grep, sed, mawk, findutils, tar, gzip, diffutils,
# python3.11 with its stdlib, and sandboxd (starlette, uvicorn, orjson) + openforge's
# sandboxes package. Harness images add node and the harness on top of it the same way.
set -euo pipefail
IMAGE=${1:-openforge-sandbox:latest}
ENGINE=${2:-podman}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=${PYTHON:-$REPO/.venv/bin/python}
CTX=$(mktemp -d)
trap 'rm -rf "$CTX"' EXIT
ROOT=$CTX/rootfs
mkdir -p "$ROOT"

PKGS="base-files dash bash coreutils grep sed mawk findutils tar gzip diffutils libc6
      libc-bin libpython3.11-minimal libpython3.11-stdlib python3.11-minimal python3.11
      tzdata ca-certificates netbase"
for p in $PKGS; do
  dpkg -L "$p" 2>/dev/null || { echo "build-sandbox-image: package $p missing on host" >&2; exit 1; }
done | sort -u | while read -r f; do
  if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi
done > "$CTX/files"

# Shared libraries every ELF needs (closure through ldd), beyond the listed packages.
grep -E '^/usr/(bin|sbin|lib)/|^/bin/|^/sbin/' "$CTX/files" | while read -r f; do
  [ -L "$f" ] || { file -b "$f" 2>/dev/null | grep -q ELF && ldd "$f" 2>/dev/null; } || true
done | grep -oE '/[^ ]+\.so[^ ]*' | sort -u | while read -r lib; do
  echo "$lib"; readlink -f "$lib"
done >> "$CTX/files"
echo /etc/ssl/certs/ca-certificates.crt >> "$CTX/files"

# Canonical paths (/lib/x -> /usr/lib/x on merged-/usr hosts) so no file is listed twice.
"$PY" -c 'import os, sys
print("\n".join(sorted({os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
                        for p in sys.stdin.read().split()})))' < "$CTX/files" \
  | tar -C / --no-recursion --hard-dereference -cf - -T - | tar -C "$ROOT" -xf -
# Merged /usr: the top-level links Debian bookworm has.
for d in bin sbin lib lib64; do
  [ -e "$ROOT/$d" ] || { [ -L "/$d" ] && ln -s "$(readlink "/$d")" "$ROOT/$d"; } || true
done
ln -sf python3.11 "$ROOT/usr/bin/python3"
ln -sf dash "$ROOT/usr/bin/sh"
mkdir -p "$ROOT"/{tmp,root,workspace,proc,sys,dev,etc}
chmod 1777 "$ROOT/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$ROOT/etc/passwd"
printf 'root:x:0:\n' > "$ROOT/etc/group"

# sandboxd's Python dependencies, copied file by file from this venv's installed dists.
SITE=$ROOT/opt/openforge/site
"$PY" - "$SITE" <<'PYEOF'
import shutil, sys
from importlib.metadata import distribution
from pathlib import Path
site = Path(sys.argv[1])
for name in ("starlette", "uvicorn", "orjson", "anyio", "h11", "idna", "sniffio", "click",
             "typing_extensions"):
    dist = distribution(name)
    for f in dist.files or []:
        src = Path(dist.locate_file(f))
        if src.is_file() and "__pycache__" not in f.parts:
            (site / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, site / f)
PYEOF
mkdir -p "$SITE/openforge/sandboxes"
cp "$REPO/src/openforge/__init__.py" "$SITE/openforge/"
cp "$REPO"/src/openforge/sandboxes/{__init__,base,fspaths,gateway_relay,procs,runs,runtime,sandboxd,sandboxd_verify,verifier,verifier_python}.py "$SITE/openforge/sandboxes/"
# runtime.py takes the sandbox paths from guest/common.py (standard library only).
mkdir -p "$SITE/openforge/guest"
cp "$REPO"/src/openforge/guest/{__init__,common}.py "$SITE/openforge/guest/"
# python3 for harnesses in a task's own image (sandboxes/runtime.py: mounted at /opt/openforge/rt).
mkdir -p "$ROOT/opt/openforge/bin"
PYTHONPATH="$REPO/src" "$PY" -c 'from openforge.sandboxes.runtime import python_wrapper; print(python_wrapper(), end="")' \
  > "$ROOT/opt/openforge/bin/python3"
chmod 755 "$ROOT/opt/openforge/bin/python3"

tar -C "$ROOT" -czf "$CTX/rootfs.tar.gz" .
cp "$HERE/Containerfile.sandbox" "$CTX/Containerfile"
# The sources' hash as a label: tests (and users) can tell an image older than the code.
SOURCES=$(cat "$REPO"/src/openforge/sandboxes/{__init__,base,fspaths,gateway_relay,procs,runs,runtime,sandboxd,sandboxd_verify,verifier,verifier_python}.py \
  "$REPO"/src/openforge/guest/{__init__,common}.py | sha256sum | cut -c1-16)
"$ENGINE" build -q --label "openforge.dev/sources=$SOURCES" -t "$IMAGE" -f "$CTX/Containerfile" "$CTX"
echo "built $IMAGE ($(du -sh "$CTX/rootfs.tar.gz" | cut -f1) compressed rootfs)"
