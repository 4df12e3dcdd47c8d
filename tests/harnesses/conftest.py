"""Harness tests: real harnesses, a real in-process gateway (scripted engine), the real
orchestrator and bubblewrap sandboxes."""

from __future__ import annotations

import shutil

import pytest

from openforge.models.registry import DEFAULT_MODEL, models_dir

# Every harness here is installed by the setup script (scripts/install-harnesses.sh), so a
# missing one is a broken setup: the test fails and says what to run.
NEEDS = {
    "claw": "python3",
    "claude-code": "claude",
    "codex": "codex",
    "openclaw": "/opt/openforge/openclaw/bin/openclaw",
    "mini-swe-agent": "/opt/openforge/mini-swe-agent/bin/mini",
}


def require(name: str) -> None:
    """Fail with the reason when the harness, the model or the sandbox is not installed."""
    model = models_dir() / DEFAULT_MODEL
    if not model.is_dir():
        pytest.fail(f"the SmolLM2 model directory {model} is missing: the setup script pulls it")
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: the setup script installs it")
    binary = NEEDS.get(name)
    if binary and shutil.which(binary) is None:
        # OpenClaw needs Node >= 24, which install-harnesses.sh brings.
        pytest.fail(
            f"{name} is not installed ({binary} not found): run scripts/install-harnesses.sh"
        )
