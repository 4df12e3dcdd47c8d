"""A Harbor task's simulated user (a compose sidecar that calls a model, the cookbook's
simulated-user shape), through the real orchestrator on podman: in a rollout the sidecar's
``ANTHROPIC_API_KEY`` and base URL become the rollout's user-role key on the gateway, so its
calls reach the run's user engine and are recorded under the rollout with the user role,
never the policy's. Without a user engine the rollout says why, before any sandbox starts.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.suites import load_tasks
from openforge.tasks import Task
from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

from .conftest import ScriptedGateway, admin_headers

pytestmark = pytest.mark.slow
WORD = "forge-word-3"


def _config(gateway: str, out: Path, task: Task) -> RolloutConfig:
    return RolloutConfig(
        tasks=[task], harness="shell",
        harness_options={"command": f"{samples.ASK_USER} > /app/word.txt"},
        gateway_url=gateway, backend="podman", backend_options={"base_images": samples.BASE_IMAGES},
        out_dir=out, retries=0,
    )  # fmt: skip


async def test_the_sidecars_model_calls_go_to_the_user_role_and_are_recorded(
    scripted_gateway: ScriptedGateway, podman_images: dict[str, str], tmp_path: Path
) -> None:
    # The judge engine answers user-role keys too: the simulated user says the word.
    user_gateway = scripted_gateway(["hello"], judge=[WORD])
    (task,) = load_tasks(samples.harbor_simulated_user(tmp_path / "suite")).tasks
    (res,) = await run_rollouts(_config(user_gateway, tmp_path / "run", task))
    assert (res.status, res.reward) == ("completed", 1.0), (res.error, res.verifier_output)
    got = httpx.get(
        f"{user_gateway}/admin/rollouts/{res.rollout_id}",
        params={"content": 1},
        headers=admin_headers(),
    ).json()
    (call,) = got["calls"]
    assert (call["role"], call["dialect"], call["request_model"]) == (
        "user", "anthropic", "claude-sonnet-4-6",
    )  # fmt: skip
    assert "Which word do you want?" in str(call["conversation"])
    assert WORD in str(call["completion"])


async def test_without_a_user_engine_the_rollout_says_so(
    scripted_gateway: ScriptedGateway, tmp_path: Path
) -> None:
    """A gateway with no user (or judge) engine: the sidecar would call a vendor's API with
    an empty key, so the rollout is not started and says what to start the gateway with."""
    gateway = scripted_gateway(["hello"])
    (task,) = load_tasks(samples.harbor_simulated_user(tmp_path / "suite")).tasks
    (res,) = await run_rollouts(_config(gateway, tmp_path / "run", task))
    assert res.status == "infra_error"
    assert "sidecar user-server calls a model" in str(res.error)
    assert "--user-engine" in str(res.error)
