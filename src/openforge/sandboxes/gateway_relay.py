"""The host side of ``network="gateway"`` on the local backend: relay to the gateway.

A local sandbox with ``network="gateway"`` has its own network namespace: nothing of the
host's network is reachable from it. The one way out is a Unix socket bind-mounted into the
sandbox; :class:`GatewayRelay` listens on it and connects every accepted stream to the
gateway's ``host:port``, copying bytes both ways as they arrive (no buffering: SSE streams
pass through chunk by chunk). Inside, ``gateway_forwarder.py`` serves ``127.0.0.1:PORT``
onto the socket, so the harness uses an ordinary ``http://127.0.0.1:PORT`` URL.
Where the host may ``setns`` (root), the listener is instead made directly inside the
sandbox's namespace (``netns.listen_in``) and relayed from here: no process runs inside.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

__all__ = ["GatewayAddress", "GatewayRelay", "gateway_address"]

_CHUNK = 65536
# Unprivileged (capabilities dropped) processes cannot bind ports below 1024 inside.
_FALLBACK_PORT = 8080


@dataclass(frozen=True, slots=True)
class GatewayAddress:
    """Where the host reaches the gateway, and the URL and port it has inside a sandbox."""

    host: str
    port: int
    inside_port: int
    inside_url: str


def gateway_address(url: str) -> GatewayAddress:
    """Split ``url`` into the host's target and the sandbox's ``http://127.0.0.1:PORT`` URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"gateway_url must be an http(s) URL with a host, got {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    inside = port if port >= 1024 else _FALLBACK_PORT
    inside_url = urlunsplit(
        (parts.scheme, f"127.0.0.1:{inside}", parts.path, parts.query, parts.fragment)
    )
    return GatewayAddress(parts.hostname, port, inside, inside_url)


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(_CHUNK):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (ConnectionError, OSError):
        pass


class GatewayRelay:
    """Relays every connection accepted on its listeners to the gateway's TCP address.

    Listeners are a Unix socket (``serve_unix``: bind-mounted into the sandbox) or a TCP
    socket already made inside the sandbox's network namespace (``serve_socket``).
    """

    def __init__(
        self,
        address: GatewayAddress | None,
        path: str | None = None,
        upstream_uds: str | None = None,
    ) -> None:
        self.address = address
        self.path = path
        # Inside a container (sandboxd), the way on is the host's Unix socket, not TCP.
        self.upstream_uds = upstream_uds
        self._servers: set[asyncio.AbstractServer] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def serve_unix(self) -> None:
        """Bind ``path`` (replacing a stale file) and start accepting on it."""
        assert self.path is not None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._servers.add(await asyncio.start_unix_server(self._relay, path=self.path))

    async def serve_tcp(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (sandboxd: the gateway's port on the container's loopback)."""
        self._servers.add(await asyncio.start_server(self._relay, host, port))

    async def serve_socket(self, sock: socket.socket) -> asyncio.AbstractServer:
        """Accept on a listening TCP socket; stop it with :meth:`stop`."""
        server = await asyncio.start_server(self._relay, sock=sock)
        self._servers.add(server)
        return server

    def stop(self, server: asyncio.AbstractServer) -> None:
        """Stop accepting on one listener (its open connections end with their peers)."""
        self._servers.discard(server)
        server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                if self.upstream_uds is not None:
                    up_reader, up_writer = await asyncio.open_unix_connection(self.upstream_uds)
                else:
                    assert self.address is not None
                    up_reader, up_writer = await asyncio.open_connection(
                        self.address.host, self.address.port
                    )
            except OSError:
                return  # closing the socket tells the client the gateway is not there
            self._writers.add(up_writer)
            try:
                await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            finally:
                self._writers.discard(up_writer)
                up_writer.close()
        finally:
            self._writers.discard(writer)
            writer.close()

    async def close(self) -> None:
        """Stop every listener, drop every open connection and remove the socket file."""
        servers, self._servers = self._servers, set()
        for server in servers:
            server.close()
        for w in list(self._writers):
            w.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
