"""A real gateway subprocess (scripted engine) shared by the rollout tests."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from openforge.models.registry import DEFAULT_MODEL, models_dir

MODEL = models_dir() / DEFAULT_MODEL
OPENFORGE = str(Path(sys.executable).parent / "openforge")


def admin_headers() -> dict[str, str]:
    """The admin header for the session's gateway (its token is in the environment)."""
    return {"Authorization": f"Bearer {os.environ['OPENFORGE_ADMIN_TOKEN']}"}


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_gateway(d: Path, port: int, admin_port: int, token: str) -> subprocess.Popen[bytes]:
    """Start ``openforge gateway --engine scripted`` (every reply ``hello``) with its store in
    ``d``, models on ``port``, admin on ``admin_port`` under ``token``; return once its admin
    listener answers ``/health``."""
    if not MODEL.is_dir():
        pytest.fail(f"the SmolLM2 model directory {MODEL} is missing: the setup script pulls it")
    script = d / "script.jsonl"
    script.write_text('{"text": "hello"}\n')
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": token}
    with (d / "gateway.log").open("ab") as log:
        proc = subprocess.Popen(
            [
                OPENFORGE,
                "gateway",
                "--engine",
                "scripted",
                "--script",
                str(script),
                "--model",
                str(MODEL),
                "--store",
                str(d / "store.db"),
                "--port",
                str(port),
                "--admin-port",
                str(admin_port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    url = f"http://127.0.0.1:{admin_port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError((d / "gateway.log").read_text())
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the gateway did not answer /health: {(d / 'gateway.log').read_text()}")


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
