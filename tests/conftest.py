"""Fixtures more than one test package needs: the podman images (built once, kept by podman)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from openforge.sandboxes.container import DEFAULT_IMAGE

# The local Debian base task Dockerfiles are built FROM (deploy/build-debian-base.sh).
DEBIAN_BASE = "localhost/openforge-debian:bookworm"

REPO = Path(__file__).resolve().parents[1]
SANDBOX_SOURCES = ("__init__", "base", "fspaths", "gateway_relay", "procs", "runtime", "sandboxd")


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=False)


def _build(script: str, *args: str) -> None:
    out = subprocess.run([str(REPO / "deploy" / script), *args], capture_output=True, text=True,
                         check=False)  # fmt: skip
    if out.returncode != 0:
        pytest.fail(f"deploy/{script} failed: {out.stderr[-1500:]}")


@pytest.fixture(scope="session")
def podman_images() -> dict[str, str]:
    """The sandbox image and the local Debian base, each built once if missing or stale.

    The Debian base (deploy/build-debian-base.sh, debootstrap) takes about 70 s the first
    time on this 2-core machine and is kept by podman across sessions; task images are
    cached by content the same way, so a warm run builds nothing.
    """
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: scripts/setup.sh installs it")
    info = _podman("info")
    if info.returncode != 0:
        pytest.skip(f"podman cannot run containers here: {info.stderr.strip()[-300:]}")
    data = b"".join((REPO / "src/openforge/sandboxes" / f"{n}.py").read_bytes()
                    for n in SANDBOX_SOURCES)  # fmt: skip
    want = hashlib.sha256(data).hexdigest()[:16]
    fmt = '{{ index .Labels "openforge.dev/sources" }}'
    if _podman("image", "inspect", "--format", fmt, DEFAULT_IMAGE).stdout.strip() != want:
        _build("build-sandbox-image.sh", DEFAULT_IMAGE, "podman")
    if _podman("image", "exists", DEBIAN_BASE).returncode != 0:
        if shutil.which("debootstrap") is None:
            pytest.fail("debootstrap is missing: scripts/setup.sh installs it")
        _build("build-debian-base.sh", DEBIAN_BASE, "podman")
    return {"sandbox": DEFAULT_IMAGE, "base": DEBIAN_BASE}
