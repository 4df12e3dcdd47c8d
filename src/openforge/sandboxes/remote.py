"""The client side of ``sandboxd`` and a :class:`Sandbox` built on it.

Container and Kubernetes backends differ only in how the sandbox is made and removed; exec
and files go over HTTP to sandboxd. Transport errors become :class:`SandboxError`.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
import orjson

from openforge.sandboxes.base import ExecResult, OutputCallback, SandboxError
from openforge.sandboxes.fspaths import PathEscape
from openforge.sandboxes.verifier import VerifierExec, VerifierRun

__all__ = ["RemoteSandbox", "SandboxdClient"]

# Slack on top of an exec's own timeout before the client gives up on the server.
_GRACE_S = 30.0


class SandboxdClient:
    """Talks to one sandboxd at ``base_url`` with its bearer ``token``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        http: httpx.AsyncClient | None = None,
        uds: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {token}"}
        self._own_http = http is None
        transport = httpx.AsyncHTTPTransport(uds=uds) if uds else None
        self._http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(60.0, connect=10.0), transport=transport
        )

    async def aclose(self) -> None:
        """Close the HTTP client if this object made it."""
        if self._own_http:
            await self._http.aclose()

    async def health(self) -> bool:
        """True when sandboxd answers its health check."""
        try:
            r = await self._http.get(f"{self.base_url}/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    async def wait_ready(self, timeout: float) -> None:
        """Poll /health until it answers or ``timeout`` passes (then SandboxError)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await self.health():
            if loop.time() > deadline:
                raise SandboxError(f"sandboxd at {self.base_url} not ready after {timeout}s")
            await asyncio.sleep(0.05)

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            r = await self._http.post(
                f"{self.base_url}{path}", content=orjson.dumps(body), headers=self._headers
            )
        except httpx.HTTPError as exc:
            raise SandboxError(f"sandboxd {path}: {exc!r}") from exc
        return _checked(r, path)

    async def exec(
        self,
        cmd: Sequence[str] | str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run ``cmd`` through sandboxd, streaming its output to ``on_output``."""
        body = {
            "cmd": cmd if isinstance(cmd, str) else list(cmd),
            "env": dict(env or {}),
            "cwd": cwd,
            "timeout": timeout,
            "stdin": base64.b64encode(stdin).decode() if stdin is not None else None,
        }
        read_timeout = None if timeout is None else timeout + _GRACE_S
        out, err = bytearray(), bytearray()
        end: dict[str, Any] = {}
        try:
            async with self._http.stream(
                "POST", f"{self.base_url}/exec", content=orjson.dumps(body),
                headers=self._headers, timeout=httpx.Timeout(read_timeout, connect=10.0),
            ) as r:  # fmt: skip
                if r.status_code != 200:
                    await r.aread()
                    _checked(r, "/exec")
                async for line in r.aiter_lines():
                    if not line:
                        continue
                    event = orjson.loads(line)
                    if "stream" not in event:
                        end = event
                        continue
                    chunk = base64.b64decode(event["data"])
                    (out if event["stream"] == "stdout" else err).extend(chunk)
                    if on_output is not None:
                        maybe = on_output(event["stream"], chunk)
                        if inspect.isawaitable(maybe):
                            await maybe
        except (httpx.HTTPError, orjson.JSONDecodeError) as exc:
            raise SandboxError(f"sandboxd /exec: {exc!r}") from exc
        if "exit_code" not in end:
            raise SandboxError(f"sandboxd /exec ended without an exit code: {end}")
        return ExecResult(int(end["exit_code"]), bytes(out), bytes(err), bool(end["timed_out"]))

    async def mark_processes(self) -> None:
        """Tell sandboxd that the processes running now are the environment's."""
        await self._post("/procs/mark", {})

    async def kill_leftovers(self) -> int:
        """Kill every process started since the mark (but sandboxd); the number killed."""
        body = await self._post("/procs/reap", {})
        return int(body["killed"])

    async def verify(self, run: VerifierExec, env: Mapping[str, str]) -> VerifierRun:
        """Run a verifier through sandboxd's ``/verify`` (``sandboxd_verify.py``)."""

        def b64(files: Mapping[str, bytes]) -> dict[str, str]:
            return {p: base64.b64encode(d).decode() for p, d in files.items()}

        body = {
            "cmd": run.cmd if isinstance(run.cmd, str) else list(run.cmd),
            "files": b64(run.files),
            "dir": run.dir,
            "env": {**env, **run.env},
            "timeout": run.timeout,
            "max_output": run.max_output,
            "own_uid": run.own_uid,
            "outputs": run.outputs,
        }
        limit = None if run.timeout is None else run.timeout + _GRACE_S
        try:
            r = await self._http.post(
                f"{self.base_url}/verify", content=orjson.dumps(body), headers=self._headers,
                timeout=httpx.Timeout(limit, connect=10.0),
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise SandboxError(f"sandboxd /verify: {exc!r}") from exc
        if r.status_code == 404:
            raise SandboxError(
                "sandboxd has no /verify: the sandbox image is older than this OpenForge "
                "(rebuild it: deploy/build-sandbox-image.sh)"
            )
        a = _checked(r, "/verify")
        result = ExecResult(
            int(a["exit_code"]), base64.b64decode(a["stdout"]), base64.b64decode(a["stderr"]),
            bool(a["timed_out"]),
        )  # fmt: skip
        outputs = {str(k): base64.b64decode(v) for k, v in a["outputs"].items()}
        uid = None if a.get("uid") is None else int(a["uid"])
        return VerifierRun(
            result, base64.b64decode(a["channel"]), outputs, [str(n) for n in a["notes"]], uid
        )

    async def put(self, files: Mapping[str, bytes]) -> None:
        """Write files inside the sandbox."""
        encoded = {p: base64.b64encode(d).decode() for p, d in files.items()}
        await self._post("/files/put", {"files": encoded})

    async def get(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files from the sandbox; missing ones are absent."""
        body = await self._post("/files/get", {"paths": list(paths)})
        return {p: base64.b64decode(d) for p, d in body["files"].items()}


def _checked(r: httpx.Response, path: str) -> Any:
    if r.status_code == 200:
        return r.json()
    try:
        error = r.json()["error"]
        kind, message = error["type"], error["message"]
    except (ValueError, KeyError, TypeError):
        kind, message = "http_error", r.text[:500]
    if kind == "path_escape":
        raise PathEscape(message)
    if r.status_code == 404:  # sandboxd answers 404 only for a route it does not have
        raise SandboxError(
            f"sandboxd has no {path}: the sandbox image is older than this OpenForge; "
            "rebuild it (deploy/build-sandbox-image.sh IMAGE ENGINE)"
        )
    raise SandboxError(f"sandboxd {path}: {r.status_code} {kind}: {message}")


class RemoteSandbox:
    """A :class:`Sandbox` whose exec and files go to sandboxd; ``remove`` tears it down."""

    def __init__(
        self,
        sid: str,
        client: SandboxdClient,
        gateway_url: str | None,
        remove: Callable[[], Awaitable[None]],
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.id = sid
        self.gateway_url = gateway_url
        self.client = client
        self._remove = remove
        self._closed = False
        # Set for every exec (under the exec's own env): the spec's env where the pod was
        # made before the spec was known (a warm-pool pod).
        self.env = dict(env or {})

    def _check(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")

    async def exec(
        self,
        cmd: Sequence[str] | str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run ``cmd`` in the sandbox (see :class:`SandboxdClient.exec`)."""
        self._check()
        merged = {**self.env, **env} if self.env and env else (env or self.env or None)
        return await self.client.exec(cmd, merged, cwd, timeout, stdin, on_output)

    async def mark_processes(self) -> None:
        """The processes running now are the environment's: :meth:`kill_leftovers` spares them."""
        self._check()
        await self.client.mark_processes()

    async def kill_leftovers(self) -> int:
        """Kill what was started since :meth:`mark_processes` (an agent's background
        processes), all but sandboxd; the number killed."""
        self._check()
        return await self.client.kill_leftovers()

    async def exec_verifier(self, run: VerifierExec) -> VerifierRun:
        """Run a verifier where the agent's leftovers cannot steer it (sandboxd's /verify)."""
        self._check()
        return await self.client.verify(run, self.env)

    async def put(self, files: Mapping[str, bytes]) -> None:
        """Write files in the sandbox."""
        self._check()
        await self.client.put(files)

    async def get(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files from the sandbox."""
        self._check()
        return await self.client.get(paths)

    async def close(self) -> None:
        """Remove the container or pod; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._remove()
        finally:
            await self.client.aclose()
