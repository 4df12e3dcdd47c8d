"""The admin listener on a thread and event loop of its own, so its health probe answers
while the model listener's loop is busy.

The orchestrator decides ``infra_error`` ("gateway lost mid-run") from ``GET /health`` on
the admin listener, with a deadline (``health_timeout_s``). A call with a 60 MB body keeps
the gateway's event loop for seconds at a time (recording it, freeing its millions of
token ids), and with both listeners on that loop two such calls made a probe take over
10 s: a benign rollout in flight was marked lost. Here the admin listener's server runs on
its own thread: ``/health`` and ``/`` are answered there, and every other admin request
runs on the gateway's loop (the admin API shares its store, control and rollout state),
its ``receive`` and ``send`` hopping back to the listener's loop. A probe then waits for
the interpreter lock at most, which the busy loop hands over every few milliseconds
outside single long C calls, not for the loop's whole backlog.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from concurrent.futures import Future
from typing import Any, TypeVar

import uvicorn
import uvloop
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AdminThread", "LoopBridge"]

T = TypeVar("T")
HEALTH_PATHS = frozenset({"/", "/health"})
_HEALTH = b'{"status":"ok"}'


class LoopBridge:
    """An ASGI app served on one loop that runs ``app`` on another (``loop``, set before the
    first request), except the health routes, answered where they arrive."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] in HEALTH_PATHS
            and scope["method"] in ("GET", "HEAD")
        ):
            await _health(scope, send)
            return
        assert self.loop is not None, "the bridge's loop is set when the gateway starts"
        here = asyncio.get_running_loop()

        async def receive_here() -> Message:
            return await _on(here, receive())

        async def send_here(message: Message) -> None:
            await _on(here, send(message))

        async def run() -> None:
            await self.app(scope, receive_here, send_here)

        there: Future[None] = asyncio.run_coroutine_threadsafe(run(), self.loop)
        try:
            await asyncio.wrap_future(there)
        except asyncio.CancelledError:
            there.cancel()
            raise


async def _on(loop: asyncio.AbstractEventLoop, step: Awaitable[T]) -> T:
    """``step`` awaited on ``loop`` (another thread's), from this one."""

    async def run() -> T:
        return await step

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), loop))


async def _health(scope: Scope, send: Send) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_HEALTH))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    body = b"" if scope["method"] == "HEAD" else _HEALTH
    await send({"type": "http.response.body", "body": body})


class AdminThread:
    """A uvicorn server run on a thread of its own, with its own event loop."""

    def __init__(self, server: uvicorn.Server, sock: Any) -> None:
        self.server = server
        self.sock = sock
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="openforge-admin", daemon=True)

    def _run(self) -> None:
        try:
            uvloop.run(self.server.serve(sockets=[self.sock]))
        except BaseException as exc:  # reported to start() / stop() on the gateway's loop
            self.error = exc

    async def start(self) -> None:
        """Start the thread; returns once the server accepts requests."""
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the admin listener did not start: {self.error!r}")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        """Ask the server to exit and wait for its thread (its requests run on the caller's
        loop, which stays free to finish them meanwhile)."""
        self.server.should_exit = True
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)
