#!/usr/bin/env bash
# Build a local Debian base image with debootstrap, for sites (and tests) without a public
# container registry: task Dockerfiles that say `FROM debian:bookworm` or `FROM ubuntu:24.04`
# are built FROM this image instead, through the `base_images` mapping
# (openforge.sandboxes.images; e.g. OPENFORGE_BASE_IMAGES="ubuntu:24.04=localhost/openforge-debian:bookworm").
#
#   deploy/build-debian-base.sh [IMAGE] [ENGINE] [SUITE] [MIRROR]
#   (defaults: localhost/openforge-debian:bookworm podman bookworm http://deb.debian.org/debian)
#
# The image is a `minbase` variant (apt, dpkg, bash, coreutils) with the suite's apt sources,
# so `RUN apt-get update && apt-get install -y …` works in a task's Dockerfile wherever the
# Debian mirror is reachable. Needs root (debootstrap chroots) and the debootstrap package.
set -euo pipefail
IMAGE=${1:-localhost/openforge-debian:bookworm}
ENGINE=${2:-podman}
SUITE=${3:-bookworm}
MIRROR=${4:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { echo "build-debian-base: apt-get install debootstrap" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/rootfs
# Packages debootstrap has already downloaded are kept, so a rebuild needs no network.
CACHE=${OPENFORGE_DEBOOTSTRAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/openforge/debootstrap-$SUITE}
mkdir -p "$CACHE"
debootstrap --variant=minbase --cache-dir="$CACHE" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/log" 2>&1 || {
  tail -20 "$WORK/log" >&2; exit 1; }
printf 'deb %s %s main\n' "$MIRROR" "$SUITE" > "$ROOT/etc/apt/sources.list"
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
tar -C "$ROOT" --numeric-owner -cf "$WORK/rootfs.tar" .
"$ENGINE" import --change 'CMD ["/bin/bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  "$WORK/rootfs.tar" "$IMAGE" >/dev/null
echo "built $IMAGE ($(du -sh "$WORK/rootfs.tar" | cut -f1) rootfs)"
