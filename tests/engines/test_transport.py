"""The engine stream's transport against a real socket server that counts its connections."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import uvloop
from hypothesis import given
from hypothesis import strategies as st

from openforge.engines.remote import without_field
from openforge.engines.transport import ConnectFailed, EngineTransport, LineDecoder, TransportError

Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=[asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Both loops: the gateway serves on uvloop, which calls ``connection_made`` later."""
    return request.param  # type: ignore[no-any-return]


EVENTS = [b'data: {"n": %d}\n\n' % i for i in range(5)] + [b"data: [DONE]\n\n"]


@dataclass
class Server:
    """HTTP/1.1 on 127.0.0.1: answers each POST with a chunked SSE body of ``EVENTS``."""

    close_after: bool = False  # close each connection once its response is sent
    byte_by_byte: bool = False  # write the response one byte at a time
    hold: bool = False  # stop after the first event and wait for the client to go
    drop: bool = False  # stop after the first event and close the connection
    silent: bool = False  # never answer; wait for the client to go
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                self.requests.append(head + await reader.readexactly(length))
                try:
                    await self.respond(reader, writer)
                except asyncio.IncompleteReadError:
                    return
                if self.close_after:
                    return
        finally:
            writer.close()
            self.gone.set()

    async def respond(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.silent:
            await reader.read()  # until the client closes
            raise asyncio.IncompleteReadError(b"", None)
        out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        out += b"transfer-encoding: chunked\r\n\r\n"
        events = EVENTS[:1] if self.hold or self.drop else EVENTS
        for event in events:
            out += b"%x\r\n%s\r\n" % (len(event), event)
        if self.drop:
            writer.write(out)
            await writer.drain()
            raise asyncio.IncompleteReadError(b"", None)  # ends the handler: closes
        if self.hold:
            writer.write(out)
            await reader.read()  # until the client closes
            return
        out += b"0\r\n\r\n"
        if self.byte_by_byte:
            for i in range(len(out)):
                writer.write(out[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0)
        else:
            writer.write(out)
        await writer.drain()


async def serve(server: Server) -> asyncio.Server:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = srv.sockets[0].getsockname()[1]
    return srv


async def _events(transport: EngineTransport) -> list[bytes]:
    async with transport.post("/v1/completions", b'{"x": 1}', {"X-Test": "1"}) as r:
        assert r.status == 200
        decoder = LineDecoder()
        lines = [line async for data in r.chunks() for line in decoder.decode(data)]
    return [line for line in lines if line]


def test_connection_is_reused_once_a_stream_is_read_to_its_end(run: Run) -> None:
    run(_connection_is_reused_once_a_stream_is_read_to_its_end())


async def _connection_is_reused_once_a_stream_is_read_to_its_end() -> None:
    server = Server()
    srv = await serve(server)
    transport = EngineTransport(f"http://127.0.0.1:{server.port}")
    try:
        for _ in range(5):
            assert await _events(transport) == [e.strip() for e in EVENTS]
        assert server.connections == 1 and len(server.requests) == 5
        assert server.requests[0].startswith(b"POST /v1/completions HTTP/1.1\r\n")
        assert b"X-Test: 1\r\n" in server.requests[0] and server.requests[0].endswith(b'{"x": 1}')
    finally:
        transport.close()
        srv.close()


def test_a_response_in_single_bytes_parses_the_same(run: Run) -> None:
    run(_a_response_in_single_bytes_parses_the_same())


async def _a_response_in_single_bytes_parses_the_same() -> None:
    server = Server(byte_by_byte=True)
    srv = await serve(server)
    transport = EngineTransport(f"http://127.0.0.1:{server.port}")
    try:
        assert await _events(transport) == [e.strip() for e in EVENTS]
        assert await _events(transport) == [e.strip() for e in EVENTS]
        assert server.connections == 1
    finally:
        transport.close()
        srv.close()


def test_an_idle_connection_the_server_closed_is_replaced(run: Run) -> None:
    run(_an_idle_connection_the_server_closed_is_replaced())


async def _an_idle_connection_the_server_closed_is_replaced() -> None:
    server = Server(close_after=True)
    srv = await serve(server)
    transport = EngineTransport(f"http://127.0.0.1:{server.port}")
    try:
        for _ in range(3):
            await _events(transport)
            await asyncio.sleep(0.05)  # the server's close arrives while the connection idles
        assert server.connections == 3 and len(server.requests) == 3
    finally:
        transport.close()
        srv.close()


def test_leaving_a_stream_early_closes_its_connection(run: Run) -> None:
    run(_leaving_a_stream_early_closes_its_connection())


async def _leaving_a_stream_early_closes_its_connection() -> None:
    """How the engine learns that the call was abandoned (vLLM aborts the request)."""
    server = Server(hold=True)
    srv = await serve(server)
    transport = EngineTransport(f"http://127.0.0.1:{server.port}")
    try:
        async with transport.post("/v1/completions", b"{}", {}) as r:
            async for _ in r.chunks():
                break
        await asyncio.wait_for(server.gone.wait(), 5)
        server.hold = False
        assert await _events(transport) == [e.strip() for e in EVENTS]
        assert server.connections == 2
    finally:
        transport.close()
        srv.close()


def test_a_call_cancelled_before_the_answer_starts_closes_its_connection(run: Run) -> None:
    run(_a_call_cancelled_before_the_answer_starts_closes_its_connection())


async def _a_call_cancelled_before_the_answer_starts_closes_its_connection() -> None:
    """A client that goes away while the engine has not answered yet aborts it too."""
    server = Server(silent=True)
    srv = await serve(server)
    transport = EngineTransport(f"http://127.0.0.1:{server.port}")

    async def call() -> None:
        async with transport.post("/v1/completions", b"{}", {}):
            pass

    try:
        task = asyncio.create_task(call())
        while not server.requests:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(server.gone.wait(), 5)
    finally:
        transport.close()
        srv.close()


def test_refused_and_dropped_connections_raise_transport_errors(run: Run) -> None:
    run(_refused_and_dropped_connections_raise_transport_errors())


async def _refused_and_dropped_connections_raise_transport_errors() -> None:
    server = Server(drop=True)
    srv = await serve(server)
    port = server.port
    transport = EngineTransport(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(TransportError) as broke:
            await _events(transport)
        assert broke.value.started and not isinstance(broke.value, ConnectFailed)
    finally:
        transport.close()
        srv.close()
    await srv.wait_closed()
    with pytest.raises(ConnectFailed):
        async with EngineTransport(f"http://127.0.0.1:{port}").post("/", b"", {}):
            pass


@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(1, 30), max_size=20))
def test_line_decoder_gives_the_same_lines_however_bytes_are_split(
    lines: list[bytes], cuts: list[int]
) -> None:
    lines = [line.replace(b"\n", b"").replace(b"\r", b"") for line in lines]
    data = b"".join(line + b"\r\n" for line in lines)
    decoder, out, at = LineDecoder(), [], 0
    for n in cuts:
        out += decoder.decode(data[at : at + n])
        at += n
    out += decoder.decode(data[at:]) + decoder.flush()
    assert out == lines


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=4),
    st.none() | st.lists(st.integers(0, 200_000), max_size=30),
    st.integers(0, 4),
)
def test_an_unread_field_is_cut_from_the_bytes_as_if_it_was_never_sent(
    event: dict[str, Any], ids: list[int] | None, where: int
) -> None:
    """What vLLM's first chunk carries (``prompt_token_ids``) is cut before parsing; the
    rest of the event parses to what it was, wherever the field sits and whatever the
    strings around it hold (even the field's own name)."""
    items = list(event.items())
    items.insert(min(where, len(items)), ("prompt_token_ids", ids))
    items.append(("text", '"prompt_token_ids":[1]'))
    data = orjson.dumps({"choices": [dict(items)]})
    cut = orjson.loads(without_field(data, b'"prompt_token_ids"'))
    expected = {k: v for k, v in items if k != "prompt_token_ids"}
    assert cut == {"choices": [expected]}
