"""Fixtures more than one test package needs.

- The podman images (the sandbox image and the local Debian base), built once, kept by podman;
  the GUI image (deploy/build-gui-image.sh) the same way, for the tests that ask for it.
- A real PostgreSQL server for the store tests: a private cluster (initdb + pg_ctl under a
  temporary directory, 127.0.0.1 only) starts once per session when a test asks for it;
  ``OPENFORGE_TEST_POSTGRES`` may name a running server instead (a ``postgresql://`` URL of a
  database the tests may create others from). PostgreSQL is installed by scripts/setup.sh:
  a missing server fails the test.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from openforge.sandboxes.container import DEFAULT_GUI_IMAGE, sandbox_image_default
from openforge.store.pgcluster import LocalCluster

# trio (which selenium brings in for the GUI environments) registers a Hypothesis plugin whose
# setup warns when Hypothesis is first imported; with warnings as errors, a run that imported
# Hypothesis only for its end-of-session summary failed after every test had passed. Import
# it once here with exactly that warning silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="It looks like `register_random` was passed")
    import hypothesis  # noqa: F401

# The local Debian base task Dockerfiles are built FROM (deploy/build-debian-base.sh).
DEBIAN_BASE = "localhost/openforge-debian:bookworm"

REPO = Path(__file__).resolve().parents[1]
SANDBOX_SOURCES = (
    "__init__",
    "base",
    "fspaths",
    "gateway_relay",
    "procs",
    "runs",
    "runtime",
    "sandboxd",
    "sandboxd_verify",
    "verifier",
    "verifier_python",
)
# The guest files runtime.py needs, copied and hashed after SANDBOX_SOURCES in that order.
SANDBOX_GUEST_SOURCES = ("__init__", "common")
# What deploy/build-gui-image.sh hashes into its image's openforge.dev/sources label.
GUI_SOURCES = ("deploy/build-gui-image.sh", "deploy/gui-requirements.txt")


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
    data += b"".join((REPO / "src/openforge/guest" / f"{n}.py").read_bytes()
                     for n in SANDBOX_GUEST_SOURCES)  # fmt: skip
    want = hashlib.sha256(data).hexdigest()[:16]
    fmt = '{{ index .Labels "openforge.dev/sources" }}'
    # $OPENFORGE_SANDBOX_IMAGE: a tag of one's own, where several checkouts share podman.
    image = sandbox_image_default()
    if _podman("image", "inspect", "--format", fmt, image).stdout.strip() != want:
        _build("build-sandbox-image.sh", image, "podman")
    if _podman("image", "exists", DEBIAN_BASE).returncode != 0:
        if shutil.which("debootstrap") is None:
            pytest.fail("debootstrap is missing: scripts/setup.sh installs it")
        _build("build-debian-base.sh", DEBIAN_BASE, "podman")
    return {"sandbox": image, "base": DEBIAN_BASE}


@pytest.fixture(scope="session")
def uv_base(podman_images: dict[str, str]) -> str:
    """The offline uv base image (deploy/build-uv-base.sh), built from the Debian base once
    per version of its script."""
    script = REPO / "deploy" / "build-uv-base.sh"
    tag = "localhost/openforge-debian-uv:" + hashlib.sha256(script.read_bytes()).hexdigest()[:16]
    if _podman("image", "exists", tag).returncode != 0:
        pip = str(Path(sys.executable).parent / "pip")
        out = subprocess.run(
            ["bash", str(script), tag, "podman", podman_images["base"]],
            capture_output=True, text=True, check=False, env={**os.environ, "PIP": pip},
        )  # fmt: skip
        if out.returncode != 0:
            pytest.fail(f"deploy/build-uv-base.sh failed: {out.stderr[-1500:]}")
    return tag


@pytest.fixture(scope="session")
def gui_image(podman_images: dict[str, str]) -> str:
    """The GUI image (chromium, Xvfb, the GUI venv), built FROM the Debian base when missing
    or built from another script or wheel list: about 4 min on this 2-core machine (apt
    downloads included), 1.26 GB; kept by podman across sessions."""
    want = hashlib.sha256(b"".join((REPO / p).read_bytes() for p in GUI_SOURCES)).hexdigest()
    fmt = '{{ index .Labels "openforge.dev/sources" }}'
    if _podman("image", "inspect", "--format", fmt, DEFAULT_GUI_IMAGE).stdout.strip() != want[:16]:
        _build("build-gui-image.sh", DEFAULT_GUI_IMAGE, "podman", podman_images["base"])
    return DEFAULT_GUI_IMAGE


class PostgresServer:
    """Makes a fresh database per test on one server."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url

    def new_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return urlsplit(self.admin_url)._replace(path="/" + name).geturl()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (a private cluster unless one is named)."""
    given = os.environ.get("OPENFORGE_TEST_POSTGRES")
    if given:
        yield PostgresServer(given)
        return
    with LocalCluster.temporary() as cluster:
        yield PostgresServer(cluster.url())


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty PostgreSQL database for one test."""
    return postgres_server.new_database()
