"""Fixtures for the GUI environment tests: a local sandbox backend, a scripted gateway."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pytest

from gateway_process import Reply, admin_headers, free_port, start_gateway
from openforge.sandboxes.local import LocalBackend

__all__ = ["ScriptedGateway", "admin_headers", "backend", "scripted_gateway"]


class ScriptedGateway(Protocol):
    """Starts a scripted gateway (policy replies, optional judge replies); its admin URL."""

    def __call__(self, replies: Sequence[Reply], judge: Sequence[Reply] | None = None) -> str:
        """Start one; return its admin URL."""
        ...


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    """A local (bubblewrap) backend rooted in the test's tmp dir."""
    be = LocalBackend(root=tmp_path / "sandboxes")
    try:
        yield be
    finally:
        await be.close()


@pytest.fixture(scope="module")
def scripted_gateway(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ScriptedGateway]:
    """Start ``openforge gateway --engine scripted`` with the given replies (a text, or a
    script line such as ``{"tool_calls": [...]}``) and, when given, a scripted judge engine's;
    returns its admin URL. Its admin token is put in ``$OPENFORGE_ADMIN_TOKEN`` while it
    runs."""
    procs: list[subprocess.Popen[bytes]] = []
    saved = os.environ.get("OPENFORGE_ADMIN_TOKEN")
    token = secrets.token_urlsafe(32)
    os.environ["OPENFORGE_ADMIN_TOKEN"] = token

    def start(replies: Sequence[Reply], judge: Sequence[Reply] | None = None) -> str:
        admin_port = free_port()
        d = tmp_path_factory.mktemp("gateway")
        procs.append(start_gateway(d, free_port(), admin_port, token, replies, judge))
        return f"http://127.0.0.1:{admin_port}"

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        if saved is None:
            os.environ.pop("OPENFORGE_ADMIN_TOKEN", None)
        else:
            os.environ["OPENFORGE_ADMIN_TOKEN"] = saved
