"""Terminal-Bench 1's verifier templates, unchanged, scored offline on the uv base image
(deploy/build-uv-base.sh) with real podman: the oracle scores 1 and a no-op 0, with no network.

Each task is hand-written in a template shape found in the published datasets
(laude-institute/terminal-bench-datasets): EvoEval's run-tests.sh (`apt-get install curl`,
uv's installer from astral.sh, `source $HOME/.local/bin/env`, `uv init`, `uv add
pytest==8.4.1`, `uv run pytest`), DevEval's (`set -e`, the same steps unpinned in
tests/setup-uv-pytest.sh, then tests/run-uv-pytest.sh) and Aider Polyglot's (`pip3 install
pytest`, `python3 -m pytest`). Their image names the t-bench Python base, mapped to the uv base.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.sandboxes import create_backend
from openforge.sandboxes.container import ContainerBackend
from openforge.suites import load_tasks
from openforge.tasks.oracle import check_task

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "build-uv-base.sh"
TB_PYTHON = "ghcr.io/laude-institute/t-bench/python-3-13:20250620"

INSTALL_UV = """\
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set."
    exit 1
fi
uv init
"""
SHAPES = {
    "evoeval": {
        "run-tests.sh": "#!/bin/bash\n" + INSTALL_UV
        + "uv add pytest==8.4.1\n\nuv run pytest $TEST_DIR/test_outputs.py -rA",
    },
    "deveval": {
        "run-tests.sh": "#!/bin/bash\nset -e\ncd /app\nsource $TEST_DIR/setup-uv-pytest.sh\n"
        "bash $TEST_DIR/run-uv-pytest.sh",
        "tests/setup-uv-pytest.sh": "#!/bin/bash\n" + INSTALL_UV + "uv add pytest \n",
        "tests/run-uv-pytest.sh": "#! /bin/bash\n\nuv run pytest $TEST_DIR/test_outputs.py -rA",
    },
    "aider": {
        "run-tests.sh": "#!/bin/bash\nset -Eeuo pipefail\ncd /app\n"
        "pip3 install --no-cache-dir pytest 2>/dev/null || pip install --no-cache-dir pytest\n"
        "python3 -m pytest $TEST_DIR/test_outputs.py -rA\n",
    },
}  # fmt: skip
SOLVE = "#!/bin/bash\nprintf 'def add(a, b):\\n    return a + b\\n' > /app/solution.py\n"
TEST_OUTPUTS = """\
import importlib.util

def test_solution():
    spec = importlib.util.spec_from_file_location("solution", "/app/solution.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.add(2, 5) == 7
"""


def _task(root: Path, shape: str) -> Path:
    d = root / f"tb-{shape}"
    files = {
        "task.yaml": "instruction: |-\n  Write add(a, b) in /app/solution.py.\n"
        "parser_name: pytest\nmax_agent_timeout_sec: 60.0\nmax_test_timeout_sec: 120.0\n",
        "Dockerfile": f"FROM {TB_PYTHON}\nWORKDIR /app\n",
        "tests/test_outputs.py": TEST_OUTPUTS,
        "solution.sh": SOLVE,
        **SHAPES[shape],
    }  # fmt: skip
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


@pytest.fixture(scope="session")
def uv_base(podman_images: dict[str, str]) -> str:
    """The uv base image, built from the Debian base once per version of its script."""
    tag = "localhost/openforge-debian-uv:" + hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:16]
    if subprocess.run(["podman", "image", "exists", tag], check=False).returncode != 0:
        pip = str(Path(sys.executable).parent / "pip")
        out = subprocess.run(
            ["bash", str(SCRIPT), tag, "podman", podman_images["base"]],
            capture_output=True, text=True, check=False, env={**os.environ, "PIP": pip},
        )  # fmt: skip
        if out.returncode != 0:
            pytest.fail(f"deploy/build-uv-base.sh failed: {out.stderr[-1500:]}")
    return tag


@pytest.fixture
async def podman(
    uv_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ContainerBackend]:
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))  # a fresh verdict cache
    backend = create_backend("podman", base_images={TB_PYTHON: uv_base})
    assert isinstance(backend, ContainerBackend)
    yield backend
    await backend.close()


@pytest.mark.parametrize("shape", ["aider", "evoeval"])
async def test_published_template_scores_offline(
    podman: ContainerBackend, tmp_path: Path, shape: str
) -> None:
    (task,) = load_tasks(_task(tmp_path, shape)).tasks
    result = await check_task(podman, task)  # both episodes without a network
    assert (result.ok, result.oracle, result.noop, result.reason) == (True, 1.0, 0.0, ""), result


async def test_deveval_template_cannot_run_as_the_verifiers_uid(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    """DevEval's `set -e` template runs `apt-get update` (exit 100 for any uid but root) and
    sources `$HOME/.local/bin/env` (the verifier's HOME is made anew): under the verifier's
    own uid it stops before pytest, so the task could not be checked, never a 0."""
    (task,) = load_tasks(_task(tmp_path, "deveval")).tasks
    result = await check_task(podman, task)
    assert not result.ok and result.oracle is None, result
    assert "no pytest summary" in result.reason
