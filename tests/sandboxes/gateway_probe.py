"""A small gateway for network tests: an HTTP server on the host's 127.0.0.1 with a plain
route and an SSE route whose second event waits for the client to acknowledge the first (a
relay that buffered would deadlock), and the client script run inside a sandbox."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from openforge.sandboxes.base import Sandbox

# Run inside: GW=<gateway url> python3 client.py OTHER_PORT
CLIENT = b"""
import http.client, os, socket, sys
from urllib.parse import urlsplit
url = urlsplit(os.environ["GW"])
def conn():
    return http.client.HTTPConnection(url.hostname, url.port, timeout=30)
c = conn()
c.request("GET", url.path + "/hello")
print("hello:", c.getresponse().read().decode())
s = conn()
s.request("GET", url.path + "/sse")
r = s.getresponse()
print("first:", r.readline().decode().strip())
a = conn()
a.request("POST", url.path + "/ack")
a.getresponse().read()
print("rest:", r.read().decode().split())
for host, port in (("127.0.0.1", int(sys.argv[1])), ("192.0.2.1", 80)):
    try:
        socket.create_connection((host, port), 5)
        print("reached", host)
    except OSError as e:
        print("unreachable", host, e.errno)
"""


def check_client_output(out: bytes) -> None:
    """The gateway answered, the SSE stream flowed unbuffered, nothing else was reachable."""
    lines = out.decode().splitlines()
    assert lines[:3] == ["hello: gateway", "first: data: one", "rest: ['data:', 'two']"], out
    assert lines[3].startswith("unreachable 127.0.0.1 111"), lines  # ECONNREFUSED
    assert lines[4].startswith("unreachable 192.0.2.1 101"), lines  # ENETUNREACH


async def check_gateway_only(box: Sandbox, other: asyncio.Server) -> None:
    """Run :data:`CLIENT` in ``box`` against its gateway URL and :func:`check_client_output`;
    ``other`` is a host service (:func:`tcp_server`) the sandbox must not reach."""
    assert box.gateway_url is not None
    await box.put({"client.py": CLIENT})
    result = await box.exec(
        ["python3", "client.py", str(other.sockets[0].getsockname()[1])],
        env={"GW": box.gateway_url}, timeout=60,
    )  # fmt: skip
    check_client_output(result.stdout)


@asynccontextmanager
async def gateway_server() -> AsyncIterator[int]:
    """Serve the test gateway on 127.0.0.1; yields its port."""
    acked = asyncio.Event()

    async def hello(_req: Request) -> Response:
        return PlainTextResponse("gateway")

    async def sse(_req: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            yield b"data: one\n\n"
            await acked.wait()
            yield b"data: two\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def ack(_req: Request) -> Response:
        acked.set()
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/v1/hello", hello), Route("/v1/sse", sse),
                            Route("/v1/ack", ack, methods=["POST"])])  # fmt: skip
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await serving


async def tcp_server() -> asyncio.Server:
    """Another host service on 127.0.0.1 (answers "hi"): a sandbox must not reach it."""

    async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"hi")
        await w.drain()
        w.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)
