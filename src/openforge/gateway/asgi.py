"""The raw ASGI side of a model call: its body read under limits, a whole answer sent,
and the client's going away noticed while the call is answered."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive, Scope, Send

from openforge.dialects.errors import ApiError

__all__ = ["DisconnectWatch", "declared_length", "read_body", "send_full", "wait_disconnect"]

_JSON = [(b"content-type", b"application/json")]


def declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, when it sends one (uvicorn has checked it is a
    number; a chunked body has none)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(scope: Scope, receive: Receive, limit: int, timeout_s: float) -> bytes:
    """The request body; ApiError past ``limit`` bytes or when it takes over ``timeout_s``
    (a client trickling its body would otherwise hold the connection and its buffer).

    A body whose ``Content-Length`` is already over ``limit`` is refused before a byte of
    it is read: the 413 goes out at once, and the server drops the rest as it arrives (a
    client declaring 10 GB was held until the body deadline)."""
    declared = declared_length(scope)
    if declared is not None and declared > limit:
        raise ApiError(
            "request_too_large",
            f"The request body ({declared} bytes, from Content-Length) exceeds {limit} bytes.",
        )
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise asyncio.CancelledError
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise ApiError("request_too_large", f"The request body exceeds {limit} bytes.")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        raise ApiError(
            "request_timeout", f"The request body did not arrive within {timeout_s:g} s."
        ) from None


async def send_full(send: Send, status: int, body: bytes, headers: list[Any] = _JSON) -> None:
    """A complete (non-streamed) HTTP response."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(slots=True)
class DisconnectWatch:
    """Cancels the task answering a call once its client went away (``seen`` is the
    disconnect watcher's done callback), while it still answers it."""

    task: asyncio.Task[Any]
    answering: bool = True
    cancelled: bool = False

    def seen(self, watcher: asyncio.Task[None]) -> None:
        # A callback already scheduled when the answer ended finds it over: no cancel.
        if self.answering and not watcher.cancelled():
            self.cancelled = True
            self.task.cancel()


async def wait_disconnect(receive: Receive) -> None:
    """Return once the client has gone away (its ``http.disconnect``)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
