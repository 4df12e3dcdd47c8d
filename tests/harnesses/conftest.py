"""Harness tests: real harnesses, a real in-process gateway (scripted engine), the real
orchestrator and bubblewrap sandboxes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from openforge.harnesses.probe import DEFAULT_MODEL

# Claude Code, Codex and claw must run in CI (.ci/run installs them); these only skip on a
# machine where the pinned harness or bubblewrap is missing, and say so.
NEEDS = {
    "claw": "python3",
    "claude-code": "claude",
    "codex": "codex",
    "openclaw": "/opt/openforge/openclaw/bin/openclaw",
    "mini-swe-agent": "/opt/openforge/mini-swe-agent/bin/mini",
}


def require(name: str) -> None:
    """Skip with the reason when the harness or the sandbox cannot run here."""
    if not Path(DEFAULT_MODEL).is_dir():
        pytest.skip(f"the SmolLM2 model directory {DEFAULT_MODEL} is missing (CI pulls it)")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (the local sandbox backend needs it)")
    binary = NEEDS.get(name)
    if binary and shutil.which(binary) is None:
        # Printed with -rs; OpenClaw needs Node >= 24, which install-harnesses.sh brings.
        pytest.skip(
            f"{name} is not installed ({binary} not found): run scripts/install-harnesses.sh"
        )
