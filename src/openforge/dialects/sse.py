"""Server-sent events framing shared by every dialect.

One encoder (per the WHATWG ``text/event-stream`` grammar): an optional ``event:``
line, one ``data:`` line holding compact JSON (JSON never contains a raw newline, so a
single data line is always enough), and a blank line.
"""

from __future__ import annotations

__all__ = ["DONE", "MEDIA_TYPE", "frame"]

MEDIA_TYPE = "text/event-stream"
# The Chat Completions stream terminator.
DONE = b"data: [DONE]\n\n"


def frame(data: bytes, event: str | None = None) -> bytes:
    """One SSE event carrying ``data`` (already-encoded JSON) under name ``event``."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"
