"""What the HTTP engines (vLLM, SGLang) share: one client, SSE decoding, error mapping.

Each wire format is one small subclass with ``payload()`` (request body) and ``parse()``
(one stream event to a :class:`TokenChunk`); the transport lives here, once.

Exceptions::

    EngineError                 (base.py) the engine failed
    ├── EngineOverloaded        (base.py) 429 / 503 before any token: retry later or elsewhere
    ├── EngineRequestError      (base.py) another 4xx: the server refused the request itself
    │   └── ContextOverflow     (base.py) the prompt does not fit the server's context
    ├── ReplicaDown             the server could not be reached or failed before any token:
    │                           safe to retry on another replica
    └── StreamBroken            the connection failed after tokens were streamed: the call
                                fails (never continued elsewhere)

A server may serve a shorter context than the model's configuration says (vLLM's
``--max-model-len``): before its first request an engine asks the server what it serves
(:meth:`RemoteEngine.prepare`), so ``max_tokens`` is capped to the server's context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import orjson

from openforge.engines.base import (
    ContextOverflow,
    EngineError,
    EngineInfo,
    EngineOverloaded,
    EngineRequest,
    EngineRequestError,
    TokenChunk,
)
from openforge.engines.transport import ConnectFailed, EngineTransport, LineDecoder, TransportError

__all__ = [
    "RemoteEngine",
    "ReplicaDown",
    "StreamBroken",
    "StreamState",
    "default_client",
    "fit_max_tokens",
    "without_field",
]


# The slowest decoding an answer sent whole is waited for, per token it may hold: ten
# tokens a second, below any engine that is working (a loaded vLLM decodes tens per
# sequence); past it, the server is taken for hung.
_SLOWEST_TOKEN_S = 0.1


class ReplicaDown(EngineError):
    """The replica failed before producing a token; another replica may serve the request."""


class StreamBroken(EngineError):
    """The replica failed mid-stream; the tokens already sent cannot be continued elsewhere."""


@dataclass(slots=True)
class StreamState:
    """Per-request parsing state (formats that resend cumulative lists need the count)."""

    received: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def default_client() -> httpx.AsyncClient:
    """One pooled client for all replicas: connect fast, let long generations stream."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=5.0, read=600.0, write=30.0, pool=30.0),
        limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
    )


class RemoteEngine:
    """A token-in/token-out engine behind one HTTP base URL."""

    kind: ClassVar[str] = "remote"
    generate_path: ClassVar[str] = ""
    # Stream fields never read, cut from the event's bytes before it is parsed (an integer
    # list the size of the prompt costs more to parse than the rest of the stream).
    unread_fields: ClassVar[tuple[bytes, ...]] = ()
    health_path: ClassVar[str] = "/health"

    def __init__(
        self,
        url: str,
        *,
        model: str = "",
        context_length: int = 8192,
        client: httpx.AsyncClient | None = None,
        api_key: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.context_length = context_length
        self._own_client = client is None
        self.client = client or default_client()
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # The generate stream has its own lean transport (engines/transport.py); admin
        # calls and health probes go through ``client``.
        self.transport = EngineTransport(self.url)
        self._stream_headers = {"Content-Type": "application/json", **self._headers}
        self._version = "0"
        self._prepared = False

    # ---- the per-format seam --------------------------------------------------------

    def payload(self, request: EngineRequest) -> dict[str, Any]:
        """The JSON body of one streaming generate request."""
        raise NotImplementedError

    def parse(self, event: dict[str, Any], state: StreamState) -> TokenChunk | None:
        """One decoded SSE ``data:`` object to a chunk (None: nothing new)."""
        raise NotImplementedError

    async def prepare(self) -> bool:
        """Learn what the server serves before the first request (its context); True once
        done, False to try again before the next request (the server did not answer)."""
        return True

    def refused(self, status: int, body: bytes, request: EngineRequest) -> EngineError:
        """The error for a generate request answered with a 4xx other than 429."""
        text = body.decode(errors="replace")[:500]
        return EngineRequestError(f"{self.url}: HTTP {status}: {text}")

    async def update_weights(self, path: str, version: str) -> None:
        """Load the checkpoint directory at ``path`` on the server as ``version``."""
        raise NotImplementedError

    async def pause(self) -> None:
        """Hold generation (before a weight update)."""
        raise NotImplementedError

    async def resume(self) -> None:
        """Resume generation."""
        raise NotImplementedError

    # ---- shared behaviour -----------------------------------------------------------

    def info(self) -> EngineInfo:
        """Kind, served model, context length and the last weight version pushed."""
        return EngineInfo(
            kind=self.kind,
            model=self.model or self.url,
            context_length=self.context_length,
            weight_version=self._version,
        )

    async def generate(self, request: EngineRequest) -> AsyncIterator[TokenChunk]:
        """Stream the server's tokens; closing the iterator closes the connection (abort).
        A request that is not streamed (``request.stream`` false) is answered whole: one
        chunk."""
        if not self._prepared:
            self._prepared = await self.prepare()
        if not request.stream:
            yield await self._whole(request)
            return
        body = orjson.dumps(self.payload(request))
        state = StreamState()
        try:
            async with self.transport.post(self.generate_path, body, self._stream_headers) as r:
                if r.status >= 400:
                    raise self._refusal(r.status, await r.read(), request)
                events = _sse_objects(r.chunks(), self.unread_fields)
                async for event in events:
                    error = _stream_error(event)
                    if error is not None:
                        raise self._in_band(error, state, request)
                    chunk = self.parse(event, state)
                    if chunk is None:
                        continue
                    if chunk.finish_reason is not None:
                        # Read to the end ([DONE]) so the connection can serve the next call.
                        async for _ in events:
                            pass
                        await r.read()
                        yield chunk
                        return
                    yield chunk
        except ConnectFailed as exc:
            raise ReplicaDown(f"{self.url} unreachable: {exc}") from exc
        except TransportError as exc:
            if state.received == 0:
                raise ReplicaDown(f"{self.url} failed before any token: {exc}") from exc
            raise StreamBroken(f"{self.url} failed mid-stream: {exc}") from exc
        if state.received == 0:
            raise ReplicaDown(f"{self.url} closed the stream without a token")
        raise StreamBroken(f"{self.url} ended the stream without a finish reason")

    async def _whole(self, request: EngineRequest) -> TokenChunk:
        """The server's answer to ``request`` in one piece (``payload`` asks for no
        stream), parsed as one stream event. Nothing reached a client before it, so every
        failure is a :class:`ReplicaDown` (retried elsewhere) or the server's own error."""
        body = orjson.dumps(self.payload(request))
        # Nothing arrives until the answer is generated: the wait allows a slow token rate
        # on top of the stream's longest gap.
        wait = self.transport.read_timeout_s + _SLOWEST_TOKEN_S * fit_max_tokens(
            request, self.context_length
        )
        try:
            async with self.transport.post(
                self.generate_path, body, self._stream_headers, wait
            ) as r:
                data = await r.read()
                status = r.status
        except ConnectFailed as exc:
            raise ReplicaDown(f"{self.url} unreachable: {exc}") from exc
        except TransportError as exc:
            raise ReplicaDown(f"{self.url} failed before answering: {exc}") from exc
        if status >= 400:
            raise self._refusal(status, data, request)
        for name in self.unread_fields:
            data = without_field(data, name)
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ReplicaDown(f"{self.url}: undecodable answer: {data[:200]!r}") from exc
        if not isinstance(event, dict):
            raise ReplicaDown(f"{self.url}: an answer that is not an object: {data[:200]!r}")
        error = _stream_error(event)
        if error is not None:
            raise self._in_band(error, StreamState(), request)
        chunk = self.parse(event, StreamState())
        if chunk is None or chunk.finish_reason is None:
            raise ReplicaDown(f"{self.url} answered without a finish reason")
        return chunk

    async def healthy(self) -> bool:
        """Whether the server answers its health endpoint with 200."""
        try:
            response = await self.client.get(self.url + self.health_path, timeout=5.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def post_json(
        self, path: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """POST an admin request; a non-2xx answer becomes an :class:`EngineError`."""
        try:
            response = await self.client.post(
                self.url + path,
                content=orjson.dumps(body or {}),
                params=params,
                headers={"Content-Type": "application/json", **self._headers},
                timeout=600.0,
            )
        except httpx.HTTPError as exc:
            raise EngineError(f"{self.url}{path}: {exc!r}") from exc
        if response.status_code >= 400:
            raise EngineError(f"{self.url}{path}: HTTP {response.status_code}: {response.text}")
        try:
            data = orjson.loads(response.content) if response.content else {}
        except orjson.JSONDecodeError:
            return {"text": response.text}
        return data if isinstance(data, dict) else {"result": data}

    def _refusal(self, status: int, body: bytes, request: EngineRequest) -> EngineError:
        text = body.decode(errors="replace")[:500]
        if status in (429, 503):
            return EngineOverloaded(f"{self.url}: HTTP {status}: {text}")
        if status >= 500:
            return ReplicaDown(f"{self.url}: HTTP {status}: {text}")
        # The server read the request and refused it: sent again, it is refused again.
        return self.refused(status, body, request)

    def _in_band(
        self, error: tuple[str, int | None], state: StreamState, request: EngineRequest
    ) -> EngineError:
        """The error for an error event: a 4xx before any token is the request's own
        fault, as if the server had answered with that status."""
        message, status = error
        if state.received == 0 and status is not None and status < 500 and status != 429:
            return self.refused(status, message.encode(), request)
        return EngineError(f"{self.url}: {message}")

    async def close(self) -> None:
        """Close the stream's connections, and the HTTP client if this engine made it."""
        self.transport.close()
        if self._own_client:
            await self.client.aclose()


async def _sse_objects(
    chunks: AsyncIterator[bytes], unread: tuple[bytes, ...] = ()
) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an SSE stream's ``data:`` lines, up to ``[DONE]`` (without the
    ``unread`` fields)."""
    decoder = LineDecoder()
    async for data in chunks:
        for line in decoder.decode(data):
            for field_name in unread:
                line = without_field(line, field_name)
            event = _sse_event(line)
            if event is _DONE:
                return
            if event is not None:
                yield event
    for line in decoder.flush():
        event = _sse_event(line)
        if event is not None and event is not _DONE:
            yield event


_DONE: dict[str, Any] = {}  # the [DONE] sentinel


def without_field(data: bytes, name: bytes) -> bytes:
    """Compact JSON ``data`` without the member named ``name`` (given quoted, as
    ``b'"name"'``) whose value is null or a flat array; unchanged when it has none.

    A quote inside a JSON string is escaped, so the quoted name followed by a colon
    occurs only as a member name.
    """
    at = data.find(name + b":")
    if at < 0:
        return data
    value = at + len(name) + 1
    if data.startswith(b"null", value):
        end = value + 4
    elif data.startswith(b"[", value):
        end = data.find(b"]", value) + 1
        if end == 0 or b"[" in data[value + 1 : end] or b'"' in data[value:end]:
            return data  # not a flat array of numbers: leave it to the parser
    else:
        return data
    if data.startswith(b",", end):
        return data[:at] + data[end + 1 :]
    if data[at - 1 : at] == b",":
        return data[: at - 1] + data[end:]
    return data[:at] + data[end:]


def _sse_event(line: bytes) -> dict[str, Any] | None:
    """The JSON object of one ``data:`` line; ``_DONE`` for ``[DONE]``; None otherwise."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return _DONE
    if not data:
        return None
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EngineError(f"undecodable stream event: {data[:200]!r}") from exc
    return event if isinstance(event, dict) else None


def _stream_error(event: dict[str, Any]) -> tuple[str, int | None] | None:
    """The message of an error event, in any of the shapes the servers stream, and the
    HTTP status it names (None when it names none).

    vLLM (2026) streams ``{"error": {"message", "type", "param", "code"}}`` with ``code``
    the status (400 for a request it cannot serve, such as a JSON schema its grammar
    backend cannot compile, found after the stream's headers), older vLLM
    ``{"object": "error", "message": ..., "code": ...}``; SGLang ``{"error": {"message": ...}}``.
    """
    if event.get("object") == "error":
        return str(event.get("message") or event), _status(event.get("code"))
    if "error" not in event or event.get("choices") or event.get("meta_info"):
        return None
    error = event["error"]
    if isinstance(error, dict):
        return str(error.get("message") or error), _status(error.get("code"))
    return str(error), None


def _status(code: Any) -> int | None:
    return code if isinstance(code, int) and 400 <= code < 600 else None


def fit_max_tokens(request: EngineRequest, served_context: int) -> int:
    """max_tokens capped so prompt + output fit the request's and the server's context."""
    context = min(request.context_length or served_context, served_context)
    room = context - len(request.prompt_ids)
    if room <= 0:
        raise ContextOverflow(len(request.prompt_ids), context)
    wanted = request.params.max_tokens
    return room if wanted is None else min(wanted, room)
