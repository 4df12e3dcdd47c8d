"""Terminal-Bench 1's verifier templates, unchanged, scored offline on the uv base image
(deploy/build-uv-base.sh) with real podman: the oracle scores 1 and a no-op 0, with no network.

Each task is hand-written in a template shape found in the published datasets
(``harbor_samples.TB_TEMPLATES``: EvoEval's, DevEval's and Aider Polyglot's). Their image names
the t-bench Python base, mapped to the uv base. DevEval's runs under ``set -e`` and sources
``$HOME/.local/bin/env``: it scores only because the tests run with root's home as ``$HOME``,
as Terminal-Bench's harness runs them (``tasks/verify.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.sandboxes import create_backend
from openforge.sandboxes.container import ContainerBackend
from openforge.suites import load_tasks
from openforge.tasks.oracle import check_task
from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

pytestmark = pytest.mark.slow


@pytest.fixture
async def podman(
    uv_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ContainerBackend]:
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))  # a fresh verdict cache
    backend = create_backend("podman", base_images={samples.TB_PYTHON: uv_base})
    assert isinstance(backend, ContainerBackend)
    yield backend
    await backend.close()


@pytest.mark.parametrize("shape", ["aider", "deveval", "evoeval"])
async def test_published_template_scores_offline(
    podman: ContainerBackend, tmp_path: Path, shape: str
) -> None:
    (task,) = load_tasks(samples.terminal_bench_template(tmp_path, shape)).tasks
    result = await check_task(podman, task)  # both episodes without a network
    assert (result.ok, result.oracle, result.noop, result.reason) == (True, 1.0, 0.0, ""), result
