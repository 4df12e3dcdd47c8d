"""Push new weights to the engine behind the gateway after each accepted update.

The trainer writes the policy as a HF safetensors directory ``<weights_dir>/v<version>``
and asks the gateway to load it::

    POST /admin/weights {"version": "<n>", "path": "<dir>"}

The gateway pauses (new calls wait, in-flight calls finish), has its engine load the
directory (in process for ``local``; the engines' own update endpoints for vLLM and
SGLang, which must see the same path, e.g. on a shared volume), stamps later calls with
the new version, and resumes. Only the last ``keep`` versions stay on disk.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

__all__ = ["SyncResult", "WeightExporter", "WeightSync", "WeightSyncError"]


class WeightSyncError(Exception):
    """The gateway refused or failed the weight update."""


class WeightExporter(Protocol):
    def export_weights(self, target: str | Path) -> Path: ...


@dataclass(slots=True)
class SyncResult:
    version: str
    path: Path
    export_s: float
    load_s: float  # pause + drain + engine load + resume, as the gateway answered


class WeightSync:
    """Exports weights and has the gateway load them. One instance per run."""

    def __init__(
        self,
        gateway_url: str,
        weights_dir: str | Path,
        admin_token: str | None = None,
        keep: int = 2,
        timeout_s: float = 600.0,
    ) -> None:
        self.gateway_url = gateway_url.rstrip("/")
        self.weights_dir = Path(weights_dir)
        self.keep = max(1, keep)
        headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        # Drain waits for in-flight calls, which can be long agent turns.
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout_s)

    async def push(self, exporter: WeightExporter, version: int | str) -> SyncResult:
        """Export ``exporter``'s weights as ``version`` and load them into the engine."""
        target = self.weights_dir / f"v{version}"
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        path = await asyncio.to_thread(exporter.export_weights, target)
        t1 = time.perf_counter()
        await self.load(str(version), path)
        t2 = time.perf_counter()
        await asyncio.to_thread(self._prune, path)
        return SyncResult(str(version), path, t1 - t0, t2 - t1)

    async def load(self, version: str, path: Path | None) -> None:
        """``POST /admin/weights``; ``path=None`` only re-stamps the version."""
        body: dict[str, str] = {"version": version}
        if path is not None:
            body["path"] = str(path.resolve())
        try:
            resp = await self._client.post(f"{self.gateway_url}/admin/weights", json=body)
        except httpx.HTTPError as exc:
            raise WeightSyncError(f"gateway {self.gateway_url} unreachable: {exc!r}") from exc
        if resp.status_code != 200:
            raise WeightSyncError(
                f"gateway refused weights {version}: {resp.status_code} {_message(resp)}"
            )

    async def status(self) -> dict[str, object]:
        """The gateway's ``GET /admin/status``."""
        resp = await self._client.get(f"{self.gateway_url}/admin/status")
        resp.raise_for_status()
        out: dict[str, object] = resp.json()
        return out

    def _prune(self, current: Path) -> None:
        versions = sorted(
            (p for p in self.weights_dir.glob("v*") if p.is_dir() and p.name[1:].isdigit()),
            key=lambda p: int(p.name[1:]),
        )
        for old in versions[: -self.keep]:
            if old != current:
                shutil.rmtree(old, ignore_errors=True)

    async def close(self) -> None:
        await self._client.aclose()


def _message(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error", {})
        return str(err.get("message") or resp.text[:300])
    except ValueError:
        return resp.text[:300]
