"""A real gateway subprocess (scripted engine) shared by the rollout tests."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from gateway_process import (
    MODEL,
    OPENFORGE,
    ScriptedGateway,
    admin_headers,
    free_port,
    scripted_gateway,
    start_gateway,
)

__all__ = [
    "MODEL",
    "OPENFORGE",
    "ScriptedGateway",
    "admin_headers",
    "free_port",
    "gateway",
    "scripted_gateway",
    "start_gateway",
]


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway subprocess shared by the session (see :func:`start_gateway`); yields its admin
    listener's URL (what ``--gateway`` takes). Its admin token is in
    ``$OPENFORGE_ADMIN_TOKEN`` for the session, where the orchestrator and CLI read it."""
    port, admin_port = free_port(), free_port()
    token = secrets.token_urlsafe(32)
    saved = os.environ.get("OPENFORGE_ADMIN_TOKEN")
    os.environ["OPENFORGE_ADMIN_TOKEN"] = token
    proc = start_gateway(tmp_path_factory.mktemp("gateway"), port, admin_port, token)
    try:
        yield f"http://127.0.0.1:{admin_port}"
    finally:
        if saved is None:
            del os.environ["OPENFORGE_ADMIN_TOKEN"]
        else:
            os.environ["OPENFORGE_ADMIN_TOKEN"] = saved
        proc.terminate()
        proc.wait(timeout=30)
