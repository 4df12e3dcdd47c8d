"""HTTP connections with deadlines, and errors below the app in JSON.

uvicorn's httptools protocol, with two changes a gateway open to hostile clients needs:

- **A deadline for a request's head.** A connection that opens and trickles its request line
  and headers (slowloris) is closed after ``header_timeout_s``. The deadline starts when the
  connection is made and again when a new request's first byte arrives on a kept-alive one;
  an idle kept-alive connection between requests is left alone (harnesses hold theirs open
  while tools run), as uvicorn's own keep-alive timeout already governs it.
- **Malformed requests answered in JSON.** uvicorn answers bytes it cannot parse with a
  plain-text 400; here the body is an error both OpenAI and Anthropic clients read.

The body's own deadline is the app's (``read_body``), where the request is known.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["generic_error", "guarded_protocol"]


def generic_error(kind: str, message: str) -> bytes:
    """An error body for a request whose dialect is unknown: Anthropic's envelope, whose
    ``error`` object is also OpenAI's (``message``, ``type``, ``param``, ``code``)."""
    return orjson.dumps(
        {"type": "error", "error": {"type": kind, "message": message, "param": None, "code": None}}
    )


def guarded_protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """An httptools protocol class whose request heads must arrive within the deadline."""

    class GuardedProtocol(HttpToolsProtocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._head_deadline is None:
                self._head_deadline = self.loop.call_later(header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _too_slow(self) -> None:
            self._head_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def send_400_response(self, msg: str) -> None:
            body = generic_error("invalid_request_error", msg)
            head = (
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            )
            self.transport.write(head + body)
            self.transport.close()

    return GuardedProtocol
