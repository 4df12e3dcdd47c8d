"""Starting a gateway: in-process (:class:`Gateway`) or as a child (:class:`GatewayProcess`).

Every gateway has two listeners: the model listener (``url``) that harnesses reach, and
the admin listener (``control_url``; its API under ``admin_url``) for the orchestrator and
trainer, which always requires ``admin_token``. In-process, for tests and embedding::

    async with Gateway(engine, store, model=path, allow_anonymous=True) as gw:
        gw.url          # http://127.0.0.1:<port>: the model API
        gw.control_url  # http://127.0.0.1:<admin port>: what the orchestrator is given
        gw.admin_url    # gw.control_url + "/admin"
        gw.admin_headers  # {"Authorization": "Bearer <token>"}

As a subprocess (the orchestrator and trainer keep the gateway off their own loop)::

    proc = await GatewayProcess.start(["--engine", "scripted", "--script", "s.jsonl",
                                       "--model", path, "--store", "s.db"])
    proc.url; proc.control_url; await proc.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from openforge.engines.base import Engine, TextEngine
from openforge.gateway import cyclic_gc
from openforge.gateway.admin_thread import AdminThread, LoopBridge
from openforge.gateway.app import GatewayConfig, build_apps
from openforge.gateway.connections import guarded_protocol
from openforge.gateway.limits import Limits
from openforge.gateway.roles import RoleEngine
from openforge.lifetime import exit_with_parent
from openforge.store.base import Store
from openforge.store.location import open_store
from openforge.store.schemas import CallRole

__all__ = ["Gateway", "GatewayProcess", "Limits", "bind_socket", "serve"]


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _uvicorn_config(app: Any, log_level: str, header_timeout_s: float) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        http=guarded_protocol(header_timeout_s),
        loop="uvloop",
        lifespan="off",
        log_level=log_level,
        access_log=False,
        # Nothing here reads the client's address, so uvicorn's X-Forwarded-* rewriting
        # (a middleware around every request: ~1.5% of the gateway's CPU at one
        # connection) is off.
        proxy_headers=False,
        # Harness streams idle while tools run; keep their connections.
        timeout_keep_alive=600,
        backlog=2048,
    )


class _Server(uvicorn.Server):
    """uvicorn without its signal capture: the embedding program owns its signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _url(host: str, port: int) -> str:
    # A wildcard bind is reachable at loopback from this machine; a public URL for other
    # machines is the operator's to give (--public-url).
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Gateway:
    """A gateway served by uvicorn on the running event loop, on two listeners."""

    def __init__(
        self,
        engine: Engine | TextEngine,
        store: Store,
        *,
        model: str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        admin_host: str = "127.0.0.1",
        admin_port: int = 0,
        allow_anonymous: bool = False,
        admin_token: str | None = None,
        public_url: str | None = None,
        log_level: str = "warning",
        finish_drain_s: float = 10.0,
        limits: Limits | None = None,
        roles: Mapping[CallRole, RoleEngine] | None = None,
        sockets: tuple[socket.socket, socket.socket] | None = None,
        tool_format: str | None = None,
        reasoning_format: str | None = None,
    ) -> None:
        """``sockets``: the model and admin listeners, already bound (workers share them);
        else they are bound here on ``host:port`` and ``admin_host:admin_port``.
        ``tool_format`` / ``reasoning_format``: override the model family's formats."""
        self.engine = engine
        self.roles = dict(roles or {})
        self.store = store
        self.host = host
        self._sock, self._admin_sock = sockets or (
            bind_socket(host, port),
            bind_socket(admin_host, admin_port),
        )
        self.port: int = self._sock.getsockname()[1]
        self.admin_port: int = self._admin_sock.getsockname()[1]
        self.url = _url(host, self.port)
        self.control_url = _url(admin_host, self.admin_port)
        # Never None: without a configured token the admin listener gets a random one
        # that only this process (and whoever it hands ``admin_token`` to) knows.
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self.config = GatewayConfig(
            model=str(model),
            admin_token=self.admin_token,
            public_url=(public_url or self.url).rstrip("/"),
            allow_anonymous=allow_anonymous,
            finish_drain_s=finish_drain_s,
            limits=limits or Limits(),
            tool_format=tool_format,
            reasoning_format=reasoning_format,
        )
        self.apps = build_apps(engine, store, self.config, self.roles)
        self._log_level = log_level
        self._server = _Server(
            _uvicorn_config(self.apps.model, log_level, self.config.limits.header_timeout_s)
        )
        self._task: asyncio.Task[None] | None = None
        # The admin listener runs on a thread of its own (gateway/admin_thread.py).
        self._admin: AdminThread | None = None
        self._gc_installed = False

    @classmethod
    def at_store(cls, engine: Engine | TextEngine, location: str | Path, **kwargs: Any) -> Gateway:
        """A gateway on the store at ``location`` (a SQLite path or ``postgresql://`` URL),
        which it closes when it stops; ``kwargs`` as for the constructor."""
        return cls(engine, open_store(location), **kwargs)

    @property
    def admin_url(self) -> str:
        """The admin API's root URL (on the admin listener)."""
        return self.control_url + "/admin"

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header every admin request carries."""
        return {"Authorization": f"Bearer {self.admin_token}"}

    async def start(self) -> Gateway:
        """Start serving; returns once the socket accepts requests."""
        # The pause and weight version every gateway on the store shares, before serving.
        assert self.apps.fleet is not None
        await self.apps.fleet.start()
        self._task = task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if task.done():
                task.result()  # raises the startup error
            await asyncio.sleep(0.005)
        bridge = LoopBridge(self.apps.admin)
        bridge.loop = asyncio.get_running_loop()
        head_s = self.config.limits.header_timeout_s
        admin = _Server(_uvicorn_config(bridge, self._log_level, head_s))
        self._admin = AdminThread(admin, self._admin_sock)
        await self._admin.start()
        if not self._gc_installed:  # once started: a failed start leaves the GC as it was
            cyclic_gc.install()
            self._gc_installed = True
        return self

    async def stop(self) -> None:
        """Stop accepting, let open requests end, close the engine and the store."""
        if self._gc_installed:
            cyclic_gc.uninstall()
            self._gc_installed = False
        self._server.should_exit = True
        if self._admin is not None:
            self._admin.server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._admin is not None:
            await self._admin.stop()
            self._admin = None
        if self.apps.fleet is not None:
            await self.apps.fleet.stop()
        self._sock.close()
        self._admin_sock.close()
        for service in self.apps.services.values():
            await service.images.close()
        await self.engine.close()
        # Judge and user may share one engine: close each once.
        for role_engine in {id(r.engine): r.engine for r in self.roles.values()}.values():
            await role_engine.close()
        await self.store.close()

    async def __aenter__(self) -> Gateway:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def serve(make: Callable[[], Gateway], on_ready: Callable[[Gateway], None] | None = None) -> None:
    """Serve the gateway ``make`` builds (called on the serving loop) until SIGINT/SIGTERM
    (the CLI's entry point); ``on_ready(gateway)`` once bound."""
    import uvloop

    async def main() -> None:
        gateway = make()
        await gateway.start()
        if on_ready is not None:
            on_ready(gateway)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await gateway.stop()

    uvloop.run(main())


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class GatewayProcess:
    """``openforge gateway …`` in a child process; :meth:`start` waits until it answers."""

    def __init__(
        self, proc: asyncio.subprocess.Process, url: str, control_url: str, admin_token: str
    ) -> None:
        self.proc = proc
        self.url = url
        self.control_url = control_url
        self.admin_url = control_url + "/admin"
        self.admin_token = admin_token
        self.admin_headers = {"Authorization": f"Bearer {admin_token}"}

    @classmethod
    async def start(
        cls,
        args: list[str],
        host: str = "127.0.0.1",
        port: int | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 120.0,
        admin_port: int | None = None,
    ) -> GatewayProcess:
        """Run ``openforge gateway ARGS --host HOST --port PORT --admin-port P`` (free ports
        if None), with a fresh admin token unless ``env`` names one."""
        port = _free_port(host) if port is None else port
        admin_port = _free_port("127.0.0.1") if admin_port is None else admin_port
        env = dict(env or {})
        token = env.setdefault("OPENFORGE_ADMIN_TOKEN", secrets.token_urlsafe(32))
        argv = [sys.executable, "-m", "openforge.gateway", *args, "--host", host]
        argv += ["--port", str(port), "--admin-port", str(admin_port)]
        proc = await asyncio.create_subprocess_exec(
            *argv, env={**os.environ, **env}, preexec_fn=exit_with_parent(os.getpid())
        )
        url, control_url = _url(host, port), _url("127.0.0.1", admin_port)
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient() as client:
            for probe in (url, control_url):
                while True:
                    if proc.returncode is not None:
                        raise RuntimeError(
                            f"gateway exited with {proc.returncode} before answering"
                        )
                    with contextlib.suppress(httpx.TransportError):
                        if (await client.get(probe + "/health", timeout=1.0)).status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        proc.kill()
                        raise RuntimeError(f"gateway at {probe} did not answer in {timeout_s}s")
                    await asyncio.sleep(0.1)
        return cls(proc, url, control_url, token)

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the gateway (SIGTERM: graceful) and wait for it to exit."""
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await self.proc.wait()
