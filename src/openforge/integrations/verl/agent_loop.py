"""``openforge`` agent loop for veRL 0.9.1 (importing this module needs veRL installed).

veRL loads it from an ``agent_loop_config_path`` YAML (``configs/verl/agent_loops.yaml``)::

    - name: openforge
      _target_: openforge.integrations.verl.agent_loop.OpenForgeAgentLoop
      gateway_url: http://openforge-gateway:8001   # the admin listener of the gateway in
                                                   # front of veRL's servers
      tasks: claw-mini
      harness: claw
      sandbox: kubernetes

Each prompt is one OpenForge rollout: the dataset row names the task
(``extra_info.task_id``); the harness runs in a sandbox and talks to the gateway, whose
engine is veRL's own token-in/token-out server, so the tokens veRL trains on are exactly
the ones its server sampled. The loop returns the rollout's ids, loss mask, logprobs and
verifier reward as ``AgentLoopOutput``; a rollout whose prompts showed a VLM screenshots
also returns them (``multi_modal_data``), read from the gateway's admin API by digest.
"""

from __future__ import annotations

import io
import os
import time
from typing import Any

import httpx
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from openforge.home import read_admin_token
from openforge.integrations.verl.convert import (
    call_from_json,
    output_fields,
    rollout_from_json,
    samples_of,
)

__all__ = ["OpenForgeAgentLoop"]


@register("openforge")
class OpenForgeAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """Runs one OpenForge rollout per prompt; see the module docstring for its config."""

    def __init__(
        self,
        *args: Any,
        gateway_url: str | None = None,
        tasks: str = "claw-mini",
        harness: str = "claw",
        sandbox: str = "local",
        harness_options: dict[str, Any] | None = None,
        admin_token: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("name", None)
        super().__init__(*args, **kwargs)
        self.gateway_url = (gateway_url or os.environ.get("OPENFORGE_GATEWAY_URL", "")).rstrip("/")
        if not self.gateway_url:
            raise ValueError("openforge agent loop: set gateway_url (or OPENFORGE_GATEWAY_URL)")
        self.tasks = tasks
        self.harness = harness
        self.sandbox = sandbox
        self.harness_options = dict(harness_options or {})
        self.admin_token = admin_token or read_admin_token()
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        from openforge.rollouts import RolloutConfig, run_rollouts
        from openforge.suites import load_tasks

        extra = kwargs.get("extra_info") or {}
        task_id = str(extra.get("task_id") or kwargs.get("task_id") or "")
        task = load_tasks(self.tasks).by_id().get(task_id)
        if task is None:
            raise ValueError(f"openforge agent loop: no task {task_id!r} in {self.tasks!r}")
        started = time.perf_counter()
        (result,) = await run_rollouts(
            RolloutConfig(
                tasks=[task], harness=self.harness, harness_options=self.harness_options,
                gateway_url=self.gateway_url, backend=self.sandbox, n=1, concurrency=1,
                admin_token=self.admin_token, metadata={"verl": True},
            )
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        samples: list[Any] = []
        images: list[Any] = []
        num_turns = 0
        if result.rollout_id is not None:
            rollout, calls = await self._fetch(result.rollout_id)
            num_turns = 2 * len(calls)
            if result.status != "infra_error":
                rollout.reward = result.reward
                samples = samples_of(rollout, calls)
            if samples:
                images = await self._images([i.sha256 for i in samples[0].images])
        fields = output_fields(samples, result.reward, self.response_length, num_turns, images)
        return AgentLoopOutput(**fields, metrics=AgentLoopMetrics(generate_sequences=elapsed))

    async def _images(self, digests: list[str]) -> list[Any]:
        """The images with these digests from the gateway's store, as RGB PIL images."""
        from PIL import Image

        headers = {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}
        out: list[Any] = []
        async with httpx.AsyncClient(headers=headers, timeout=60.0) as client:
            for digest in digests:
                resp = await client.get(f"{self.gateway_url}/admin/blobs/{digest}")
                resp.raise_for_status()
                with Image.open(io.BytesIO(resp.content)) as img:
                    out.append(img.convert("RGB"))
        return out

    async def _fetch(self, rollout_id: str) -> tuple[Any, list[Any]]:
        headers = {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}
        async with httpx.AsyncClient(headers=headers, timeout=60.0) as client:
            resp = await client.get(f"{self.gateway_url}/admin/rollouts/{rollout_id}?tokens=1")
            resp.raise_for_status()
            body = resp.json()
        calls = [call_from_json(c, rollout_id) for c in body.get("calls", [])]
        return rollout_from_json(body), calls
