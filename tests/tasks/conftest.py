"""Shared by the suite tests: a real local (bubblewrap) sandbox backend, and scoring one task
in it — its reference solution or an untouched workspace — through the real verifier runner."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.sandboxes import SandboxBackend, create_backend
from openforge.sandboxes.base import SandboxSpec
from openforge.tasks import Task, run_verifier


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[SandboxBackend]:
    b = create_backend("local", root=tmp_path / "sandboxes")
    yield b
    await b.close()


async def score(backend: SandboxBackend, task: Task, solve: bool) -> float:
    """The reward ``task``'s verifier gives its workspace, after ``solve.sh`` when ``solve``."""
    box = await backend.create(SandboxSpec(network="none", pids=task.pids))
    try:
        await box.put(task.workspace_bytes())
        if solve:
            await box.put({f".solution/{k}": v for k, v in task.solution_bytes().items()})
            res = await box.exec("sh .solution/solve.sh && rm -rf .solution", timeout=60)
            assert res.exit_code == 0, (task.id, res.stderr)
        return (await run_verifier(box, task)).reward
    finally:
        await box.close()
