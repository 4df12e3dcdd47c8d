"""Starting a gateway: in-process (:class:`Gateway`) or as a child (:class:`GatewayProcess`).

In-process, for tests and the orchestrator's embedded mode::

    async with Gateway(engine, store, model=path, allow_anonymous=True) as gw:
        gw.url          # http://127.0.0.1:<port>
        gw.admin_url    # gw.url + "/admin"

As a subprocess (the orchestrator and trainer keep the gateway off their own loop)::

    proc = await GatewayProcess.start(["--engine", "scripted", "--script", "s.jsonl",
                                       "--model", path, "--store", "s.db"])
    proc.url; await proc.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Generator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from openforge.engines.base import Engine, TextEngine
from openforge.gateway.app import GatewayConfig, build_app
from openforge.store.base import Store

__all__ = ["Gateway", "GatewayProcess", "bind_socket", "serve"]


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _uvicorn_config(app: Any, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        http="httptools",
        loop="uvloop",
        lifespan="off",
        log_level=log_level,
        access_log=False,
        # Harness streams idle while tools run; keep their connections.
        timeout_keep_alive=600,
        backlog=2048,
    )


class _Server(uvicorn.Server):
    """uvicorn without its signal capture: the embedding program owns its signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class Gateway:
    """A gateway served by uvicorn on the running event loop."""

    def __init__(
        self,
        engine: Engine | TextEngine,
        store: Store,
        *,
        model: str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_anonymous: bool = False,
        admin_token: str | None = None,
        public_url: str | None = None,
        log_level: str = "warning",
    ) -> None:
        self.engine = engine
        self.store = store
        self.host = host
        self.config = GatewayConfig(
            model=str(model),
            allow_anonymous=allow_anonymous,
            admin_token=admin_token,
            public_url=public_url,
        )
        self.app = build_app(engine, store, self.config)
        self._sock = bind_socket(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server = _Server(_uvicorn_config(self.app, log_level))
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """The gateway's root URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def admin_url(self) -> str:
        """The admin API's root URL."""
        return self.url + "/admin"

    async def start(self) -> Gateway:
        """Start serving; returns once the socket accepts requests."""
        # Everything loaded so far (tokenizer tables, modules) lives as long as the process;
        # freezing it keeps the cyclic GC from rescanning it on every collection, which
        # otherwise costs more than a call itself. Thresholds stay at the defaults: 7000
        # for gen 0 did less GC work but paused as often for >= 2 ms (docs/gateway.md,
        # "Performance"; bench/gateway_heap.py).
        gc.collect()
        gc.freeze()
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the startup error
            await asyncio.sleep(0.005)
        return self

    async def stop(self) -> None:
        """Stop accepting, let open requests end, close the engine and the store."""
        if self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._sock.close()
        await self.engine.close()
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


def serve(
    engine: Engine | TextEngine,
    store: Store,
    *,
    model: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    allow_anonymous: bool = False,
    admin_token: str | None = None,
    public_url: str | None = None,
    on_ready: Any = None,
) -> None:
    """Serve until SIGINT/SIGTERM (the CLI's entry point). ``on_ready(url)`` runs once bound."""
    import uvloop

    async def main() -> None:
        gateway = Gateway(
            engine,
            store,
            model=model,
            host=host,
            port=port,
            allow_anonymous=allow_anonymous,
            admin_token=admin_token,
            public_url=public_url,
            log_level="info",
        )
        await gateway.start()
        if on_ready is not None:
            on_ready(gateway.url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await gateway.stop()

    uvloop.run(main())


class GatewayProcess:
    """``openforge gateway …`` in a child process; :meth:`start` waits until it answers."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc = proc
        self.url = url
        self.admin_url = url + "/admin"

    @classmethod
    async def start(
        cls,
        args: list[str],
        host: str = "127.0.0.1",
        port: int | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 120.0,
    ) -> GatewayProcess:
        """Run ``openforge gateway ARGS --host HOST --port PORT`` (a free port if None)."""
        if port is None:
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        argv = [sys.executable, "-m", "openforge.gateway", *args, "--host", host]
        argv += ["--port", str(port)]
        proc = await asyncio.create_subprocess_exec(*argv, env={**os.environ, **(env or {})})
        url = f"http://{host}:{port}"
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient() as client:
            while True:
                if proc.returncode is not None:
                    raise RuntimeError(f"gateway exited with {proc.returncode} before answering")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(url + "/health", timeout=1.0)).status_code == 200:
                        return cls(proc, url)
                if time.monotonic() > deadline:
                    proc.kill()
                    raise RuntimeError(f"gateway at {url} did not answer in {timeout_s}s")
                await asyncio.sleep(0.1)

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the gateway (SIGTERM: graceful) and wait for it to exit."""
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await self.proc.wait()
