"""A hostile agent cannot touch its reward: from inside its sandbox it tries every admin route
on every address and port near the gateway with every key style, then answers wrongly; the
reward stays the verifier's 0 everywhere (results, the gateway's record, exports)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import orjson
import pytest

from openforge.rollouts import run_rollouts

from .conftest import admin_headers
from .test_orchestrator import config, hello_task

AGENT = Path(__file__).parent / "agents" / "hostile.py"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "podman"])
async def test_hostile_agent_cannot_reach_the_admin_api(
    gateway: str, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Kubernetes pods get the same through their NetworkPolicy (egress to the model port
    only), checked on manifests in tests/sandboxes; no cluster runs here."""
    if backend == "podman":
        request.getfixturevalue("podman_images")  # built once per session
    # The agent's script travels in the task's workspace, as any agent's own code would.
    task = hello_task()
    task = dataclasses.replace(task, workspace={**task.workspace, "hostile.py": AGENT})
    # The podman backend keeps its control sockets under the system temp dir (path length).
    options = {} if backend == "podman" else {"root": tmp_path / "boxes"}
    cfg = config(
        gateway, tmp_path, [task], "python3 hostile.py", backend=backend, backend_options=options
    )
    (res,) = await run_rollouts(cfg)
    log = (tmp_path / "run" / "rollouts" / task.id / "0" / "agent.log").read_text()
    lines = [orjson.loads(x) for x in log.splitlines() if x.startswith("{")]
    summary = next(x["summary"] for x in lines if "summary" in x)
    attempts = [x for x in lines if "url" in x]
    assert summary["tried"] == len(attempts) > 300, summary
    assert summary["breaches"] == [], summary
    # The model listener answers, and answers 404 for every admin path (no route at all).
    assert any(a["status"] == 404 for a in attempts)
    assert not [a for a in attempts if isinstance(a["status"], int) and a["status"] < 400]
    assert res.status == "completed" and res.reward == 0.0, res
    record = httpx.get(f"{gateway}/admin/rollouts/{res.rollout_id}", headers=admin_headers())
    assert record.json()["reward"] == 0.0 and record.json()["status"] == "completed"
