"""A real ``openforge gateway --engine scripted`` subprocess, for tests of the parts above the
gateway (rollouts, environments) that need one to talk to."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from openforge.models.registry import DEFAULT_MODEL, models_dir

MODEL = models_dir() / DEFAULT_MODEL
OPENFORGE = str(Path(sys.executable).parent / "openforge")


def admin_headers() -> dict[str, str]:
    """The admin header for the running gateway (its token is in the environment)."""
    return {"Authorization": f"Bearer {os.environ['OPENFORGE_ADMIN_TOKEN']}"}


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# A scripted reply: its text, or a whole script line (``{"tool_calls": [...]}``).
Reply = str | dict[str, object]


def _script(path: Path, replies: Sequence[Reply]) -> Path:
    lines = (json.dumps(r if isinstance(r, dict) else {"text": r}) for r in replies)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def start_gateway(
    d: Path,
    port: int,
    admin_port: int,
    token: str,
    replies: Sequence[Reply] | None = None,
    judge: Sequence[Reply] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``openforge gateway --engine scripted`` answering ``replies`` in turn (every reply
    ``hello`` by default; a dict is a whole script line, e.g. tool calls), with a scripted
    judge engine answering ``judge`` when given, its store and log in ``d``, models on
    ``port``, admin on ``admin_port`` under ``token``; return once its admin listener
    answers ``/health``."""
    if not MODEL.is_dir():
        pytest.fail(f"the SmolLM2 model directory {MODEL} is missing: the setup script pulls it")
    script = _script(d / "script.jsonl", replies or ["hello"])
    argv = [OPENFORGE, "gateway", "--engine", "scripted", "--script", str(script)]
    if judge is not None:
        argv += ["--judge-engine", f"scripted:{_script(d / 'judge.jsonl', judge)}"]
    argv += ["--model", str(MODEL), "--store", str(d / "store.db")]
    argv += ["--port", str(port), "--admin-port", str(admin_port)]
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": token}
    with (d / "gateway.log").open("ab") as log:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
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
