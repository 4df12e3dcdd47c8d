"""A DevEval-shaped Terminal-Bench task (``harbor_samples.terminal_bench_template``: ``set
-e``, the sourced uv setup, the project's tests into a log) through the real orchestrator on
podman, offline on the uv base image: done honestly it scores 1, left undone 0, and an agent
that breaks what the template needs in root's home (the tests' ``$HOME``) gets the honest 0,
never ``infra_error``."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.suites import load_tasks
from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

pytestmark = pytest.mark.slow
SOLVE = "printf 'def add(a, b):\\n    return a + b\\n' > /app/solution.py"
COMMANDS = {
    "honest": SOLVE,
    "noop": "true",
    # Without ~/.local/bin/env the template's `source` stops it under `set -e` before pytest.
    "break-home": f"{SOLVE} && rm -rf /root/.local",
}


async def test_deveval_shape_through_the_orchestrator(
    gateway: str, uv_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))  # no cached verdicts
    (task,) = load_tasks(samples.terminal_bench_template(tmp_path / "suite", "deveval")).tasks

    def config(name: str, command: str) -> RolloutConfig:
        return RolloutConfig(
            tasks=[dataclasses.replace(task, id=name)], harness="shell",
            harness_options={"command": command}, gateway_url=gateway, backend="podman",
            backend_options={"base_images": {samples.TB_PYTHON: uv_base}},
            out_dir=tmp_path / name, retries=0,
        )  # fmt: skip

    # The honest run builds the task's image; the other two then run side by side on it.
    (honest,) = await run_rollouts(config("honest", COMMANDS["honest"]))
    others = [name for name in COMMANDS if name != "honest"]
    runs = await asyncio.gather(*(run_rollouts(config(n, COMMANDS[n])) for n in others))
    results = {"honest": honest} | {name: r for name, (r,) in zip(others, runs, strict=True)}
    got = {name: (r.status, r.reward) for name, r in results.items()}
    assert got == {
        "honest": ("completed", 1.0),
        "noop": ("completed", 0.0),
        "break-home": ("completed", 0.0),
    }, {name: r.error for name, r in results.items()}
    # The honest run's 1 is pytest's own summary of the template's test, and the broken
    # home's 0 is the verifier's failure shown to be the agent's doing.
    assert results["honest"].error is None
    assert "no pytest summary" in str(results["break-home"].error)
