"""The generate stream's transport: keep-alive HTTP/1.1 to one engine server, parsed by httptools.

Every model call costs one POST to the engine and one streamed answer. Through httpx that
took about a quarter of the gateway's time per call on agent traffic (request building,
anyio cancel scopes and events, h11, a line decoder over text; bench/gateway.py
``--profile``), and a stream left as soon as its finish chunk arrived closed its
connection, so every call also paid a TCP connect. This transport does only what the
stream needs, on an asyncio protocol: write one request, feed what arrives to httptools
(llhttp, the parser uvicorn serves with), hand back body bytes, and put the connection
back in the pool once the response has been read to its end. Admin calls (weights,
pause, health) stay on httpx: they are rare and want its generality.

Exceptions (all :class:`TransportError`, an ``OSError``)::

    TransportError          the connection failed or broke; ``started`` says whether any
    │                       byte of the response had arrived
    └── ConnectFailed       no connection could be made (refused, unreachable, timeout)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

__all__ = ["ConnectFailed", "EngineTransport", "LineDecoder", "StreamResponse", "TransportError"]


class TransportError(OSError):
    """The connection failed or broke."""

    def __init__(self, message: str, started: bool = False) -> None:
        super().__init__(message)
        self.started = started


class ConnectFailed(TransportError):
    """No connection to the server could be made."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.lost: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._begin()

    def _begin(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.body: list[bytes] = []
        self.complete = False
        self.started = False  # any byte of this response arrived

    # ---- asyncio.Protocol ----
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP connection's

    def data_received(self, data: bytes) -> None:
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.lost = exc
            self.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = self.lost or exc
        self._wake()

    # ---- httptools callbacks ----
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        if not self.parser.should_keep_alive():
            self.close()

    # ---- used by StreamResponse ----
    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Until more of the response arrived, it ended or the connection closed."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout_s):
                await self._waiter
        finally:
            self._waiter = None

    def send(self, data: bytes) -> None:
        self._begin()
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class StreamResponse:
    """One response: its status, then its body as it arrives."""

    def __init__(self, conn: _Connection, read_timeout_s: float) -> None:
        self._conn = conn
        self._timeout = read_timeout_s

    @property
    def status(self) -> int:
        """The HTTP status code."""
        return self._conn.status

    async def _headers(self) -> None:
        conn = self._conn
        while not conn.status:
            if conn.closed:
                raise TransportError(f"connection lost: {conn.lost!r}", conn.started)
            await self._next()

    async def _next(self) -> None:
        try:
            await self._conn.wait(self._timeout)
        except TimeoutError:
            self._conn.close()
            raise TransportError(f"no data for {self._timeout:g} s", self._conn.started) from None

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive, until the response ends."""
        conn = self._conn
        while True:
            if conn.body:
                data, conn.body = b"".join(conn.body), []
                yield data
                continue
            if conn.complete:
                return
            if conn.closed:
                raise TransportError(f"connection lost mid-response: {conn.lost!r}", True)
            await self._next()

    async def read(self) -> bytes:
        """The rest of the body."""
        return b"".join([c async for c in self.chunks()])


class EngineTransport:
    """Keep-alive connections to one server (``http://host:port``), reused across calls."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 600.0,
        max_idle: int = 256,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{url}: the engine stream speaks plain http://host:port")
        self.host = parts.hostname
        self.port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._host_header = parts.netloc
        self._idle: list[_Connection] = []
        self._connect_timeout = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._max_idle = max_idle

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                transport, conn = await loop.create_connection(_Connection, self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        # uvloop calls connection_made on a later loop turn than asyncio does
        conn.transport = transport
        return conn

    def _request(self, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        head = [f"POST {self._prefix}{path} HTTP/1.1", f"Host: {self._host_header}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        head.append(f"Content-Length: {len(body)}\r\n\r\n")
        return "\r\n".join(head).encode("latin-1") + body

    @contextlib.asynccontextmanager
    async def post(
        self,
        path: str,
        body: bytes,
        headers: dict[str, str],
        read_timeout_s: float | None = None,
    ) -> AsyncIterator[StreamResponse]:
        """POST ``body``; yields the response once its headers arrived. The connection
        returns to the pool only if the response was read to its end; leaving early
        closes it (which is how an engine learns to abort the request).
        ``read_timeout_s``: the longest wait for more of the response (default: the
        transport's), e.g. longer for an answer sent whole once generated."""
        request = self._request(path, body, headers)
        while True:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            if conn.closed:
                continue
            conn.send(request)
            response = StreamResponse(conn, read_timeout_s or self.read_timeout_s)
            try:
                await response._headers()
            except TransportError as exc:
                conn.close()
                if reused and not exc.started:  # the server had closed it while idle
                    continue
                raise
            except BaseException:  # cancelled before the answer started: abort it too
                conn.close()
                raise
            break
        try:
            yield response
        finally:
            if conn.complete and not conn.closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        """Close the idle connections."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()


class LineDecoder:
    """Bytes in, complete lines out (``\\n`` or ``\\r\\n``; the rest is held until more
    arrives or :meth:`flush`)."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def decode(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes."""
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        return [line.removesuffix(b"\r") for line in lines]

    def flush(self) -> list[bytes]:
        """The last line, if the stream ended without a newline."""
        tail, self._tail = self._tail, b""
        return [tail.removesuffix(b"\r")] if tail else []
