"""Fixtures for the GUI environment tests: a local sandbox backend, a scripted gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_process import ScriptedGateway, admin_headers, scripted_gateway
from openforge.sandboxes.local import LocalBackend

__all__ = ["ScriptedGateway", "admin_headers", "backend", "scripted_gateway"]


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    """A local (bubblewrap) backend rooted in the test's tmp dir."""
    be = LocalBackend(root=tmp_path / "sandboxes")
    try:
        yield be
    finally:
        await be.close()
