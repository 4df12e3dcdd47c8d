"""Writing one call's SSE stream: what is produced together goes out together.

Engines yield ids in chunks; often several chunks are ready at once (an instant engine, a
remote engine whose SSE events arrive in one TCP read, a local engine's queue filled
while the gateway was busy). Encoding and writing each chunk on its own costs an encoder
call, an SSE frame, an ASGI ``send`` through the middleware and a socket write per token.

:class:`StreamWriter` decouples the two sides. The call's task :meth:`~StreamWriter.push`
es deltas as the parser makes them certain; a writer task wakes once the call's task
yields to the event loop (it awaits the engine, or the store) and writes everything
pushed since in one ``send``, after merging adjacent deltas of the same kind
(:func:`coalesce`). Tokens that arrive one at a time still go out one at a time, as soon
as they arrive; tokens that arrive together go out as one SSE event.

The last write (tail deltas and the dialect's final events) is made by the call's task
itself via :meth:`~StreamWriter.finish`, after the call is recorded, so the stream's last
byte still follows the store's commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import Send

from openforge.conversation import (
    CompletionDelta,
    ReasoningDelta,
    TextDelta,
    ToolCallArgumentsDelta,
)
from openforge.dialects.dialect import StreamEncoder

__all__ = ["SSE_HEADERS", "StreamWriter", "coalesce"]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def coalesce(deltas: list[CompletionDelta]) -> list[CompletionDelta]:
    """Adjacent text, reasoning or same-call argument deltas merged into one each."""
    if len(deltas) < 2:
        return deltas
    out: list[CompletionDelta] = [deltas[0]]
    for d in deltas[1:]:
        last = out[-1]
        if d.type == last.type:
            if isinstance(d, TextDelta) and isinstance(last, TextDelta):
                out[-1] = TextDelta(last.text + d.text)
                continue
            if isinstance(d, ReasoningDelta) and isinstance(last, ReasoningDelta):
                out[-1] = ReasoningDelta(last.text + d.text)
                continue
            if (
                isinstance(d, ToolCallArgumentsDelta)
                and isinstance(last, ToolCallArgumentsDelta)
                and d.index == last.index
            ):
                out[-1] = ToolCallArgumentsDelta(d.index, last.arguments + d.arguments)
                continue
        out.append(d)
    return out


class StreamWriter:
    """One call's SSE response: batched writes while generating, then one final write.

    ``feed`` is the call's incremental parser (ids → deltas); pushed ids are parsed when
    they are written, so ids that arrive together are also parsed in one call.
    """

    __slots__ = (
        "_closing",
        "_feed",
        "_head_sent",
        "_ids",
        "_pending",
        "_send",
        "_task",
        "_wake",
        "encoder",
    )

    def __init__(
        self,
        send: Send,
        encoder: StreamEncoder,
        feed: Callable[[list[int]], list[CompletionDelta]],
    ) -> None:
        self._send = send
        self.encoder = encoder
        self._feed = feed
        self._ids: list[int] = []
        self._pending: list[CompletionDelta] = []
        self._head_sent = False
        self._closing = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Whether the stream was begun (errors from now on go in-band)."""
        return self._task is not None

    def push(self, ids: list[int]) -> None:
        """Queue sampled ids; the first push begins the stream (headers and start event)."""
        self._ids += ids
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        self._wake.set()

    def parse_pending(self) -> None:
        """Parse the ids queued so far (before the parser is flushed for the tail)."""
        if self._ids:
            self._pending += self._feed(self._ids)
            self._ids = []

    def push_deltas(self, deltas: list[CompletionDelta]) -> None:
        """Queue deltas that are already parsed (the parser's tail)."""
        self._pending += deltas
        self._wake.set()

    def _take(self) -> bytes:
        self.parse_pending()
        encode = self.encoder.delta
        parts = [encode(d) for d in coalesce(self._pending)]
        self._pending.clear()
        if not self._head_sent:
            self._head_sent = True
            parts.insert(0, self.encoder.start())
        return b"".join(parts)

    async def _head(self) -> None:
        if not self._head_sent:
            await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            await self._head()
            body = self._take()
            if body:
                await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def finish(self, last: Callable[[], bytes]) -> None:
        """Stop the writer task, then write what is still queued and ``last()``."""
        if self._task is not None:
            self._closing = True
            self._wake.set()
            await self._task
        await self._head()
        body = self._take()
        body += last()  # after the queued deltas: encoders number their events in order
        await self._send({"type": "http.response.body", "body": body})

    def cancel(self) -> None:
        """Stop the writer task (the call was cancelled: the client went away)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
