"""The gateway's admin API as the orchestrator uses it: mint a rollout key (and its judge's and
simulated user's keys), finish it, read its calls back, record the monitor's flags, probe it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from openforge.store.schemas import Flag

__all__ = ["GatewayClient", "GatewayConflict", "GatewayError", "Minted", "RoleKey"]


class GatewayError(Exception):
    """The gateway could not be reached or refused a request (an infra error)."""


class GatewayConflict(GatewayError):
    """The gateway answered 409: the rollout was already finished differently."""


@dataclass(frozen=True, slots=True)
class RoleKey:
    """A key minted for a judge or a simulated user of the rollout: its calls go to the
    gateway's engine for that role and are recorded under the rollout with that role."""

    key: str
    openai_base_url: str  # the model listener, as the host (a grader) reaches it
    model: str  # the model name to ask for
    anthropic_base_url: str  # the same listener's Anthropic Messages root


@dataclass(slots=True)
class Minted:
    rollout_id: str
    key: str
    base_url: str
    role_keys: dict[str, RoleKey] = field(default_factory=dict)


class GatewayClient:
    """One shared HTTP client for a run's admin calls."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=timeout_s, limits=limits
        )

    async def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        try:
            return await self._http.post(
                path, content=orjson.dumps(body), headers={"content-type": "application/json"}
            )
        except httpx.HTTPError as exc:
            raise GatewayError(f"gateway {self.url}: {type(exc).__name__}: {exc}") from exc

    async def mint(
        self,
        task_id: str,
        group_id: str,
        metadata: dict[str, Any],
        roles: Sequence[str] = (),
        run_id: str | None = None,
        split: str | None = None,
    ) -> Minted:
        """Create a rollout on the gateway and return its key, with a key for each of
        ``roles`` (``judge``, ``user``) the gateway serves. The store records ``run_id``
        and the task's ``split``, so readers keep held-out rollouts out of training."""
        body: dict[str, Any] = {"task_id": task_id, "group_id": group_id, "metadata": metadata}
        if run_id is not None:
            body["run_id"] = run_id
        if split is not None:
            body["split"] = split
        if roles:
            body["roles"] = list(roles)
        resp = await self._post("/admin/rollouts", body)
        if resp.status_code not in (200, 201):
            raise GatewayError(f"mint: HTTP {resp.status_code}: {resp.text[:500]}")
        data = resp.json()
        role_keys = {
            role: RoleKey(
                entry["key"], entry["openai_base_url"], entry["model"], entry["anthropic_base_url"]
            )
            for role, entry in (data.get("role_keys") or {}).items()
        }
        return Minted(data["rollout_id"], data["key"], data["base_url"], role_keys)

    async def serving_roles(self) -> frozenset[str]:
        """The roles besides the policy the gateway has an engine for (``judge``, ``user``);
        empty when it has none or cannot say (a gateway from before roles)."""
        try:
            resp = await self._http.get("/admin/status")
        except httpx.HTTPError as exc:
            raise GatewayError(f"gateway {self.url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise GatewayError(f"status: HTTP {resp.status_code}: {resp.text[:500]}")
        return frozenset(resp.json().get("roles") or {})

    async def finish(
        self, rollout_id: str, status: str, reward: float | None, details: dict[str, Any]
    ) -> None:
        """Finish a rollout; a 409 (already finished differently) is reported, not hidden."""
        body: dict[str, Any] = {"status": status, "details": details}
        if reward is not None:
            body["reward"] = reward
        resp = await self._post(f"/admin/rollouts/{rollout_id}/finish", body)
        if resp.status_code == 409:
            raise GatewayConflict(f"finish {rollout_id}: HTTP 409: {resp.text[:500]}")
        if resp.status_code != 200:
            raise GatewayError(f"finish {rollout_id}: HTTP {resp.status_code}: {resp.text[:500]}")

    async def calls(self, rollout_id: str, content: bool = False) -> list[dict[str, Any]]:
        """The rollout's calls as the admin API lists them (token counts, no token ids;
        ``content``: each call's conversation and completion too)."""
        params = {"content": "1"} if content else None
        try:
            resp = await self._http.get(f"/admin/rollouts/{rollout_id}", params=params)
        except httpx.HTTPError as exc:
            raise GatewayError(f"gateway {self.url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise GatewayError(f"calls {rollout_id}: HTTP {resp.status_code}: {resp.text[:500]}")
        calls = resp.json().get("calls")
        return list(calls) if isinstance(calls, list) else []

    async def flag(self, rollout_id: str, flags: Sequence[Flag]) -> None:
        """Record the reward-hack monitor's flags on the rollout (replacing any before)."""
        body = {"flags": [dataclasses.asdict(f) for f in flags]}
        resp = await self._post(f"/admin/rollouts/{rollout_id}/flags", body)
        if resp.status_code != 200:
            raise GatewayError(f"flag {rollout_id}: HTTP {resp.status_code}: {resp.text[:500]}")

    async def health(self, timeout_s: float) -> None:
        """Probe ``GET /health``; raise :class:`GatewayError` unless it answers 200."""
        try:
            resp = await self._http.get("/health", timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise GatewayError(f"gateway {self.url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise GatewayError(f"gateway {self.url}: /health answered HTTP {resp.status_code}")

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()
