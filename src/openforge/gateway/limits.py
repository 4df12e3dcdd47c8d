"""What one request may cost the gateway (body sizes, counts, deadlines)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may cost the gateway; past any of these it gets a clear error.

    The defaults leave room for real agent traffic (Claude Code's first request is ~80 KB,
    a screenshot-heavy GUI call a few MB) while bounding what a hostile client can hold.
    """

    max_body_bytes: int = 64 << 20  # a model call's body
    max_admin_body_bytes: int = 1 << 20  # an admin call's body
    max_tools: int = 1024
    max_messages: int = 20_000
    header_timeout_s: float = 30.0  # a request's line and headers, from its first byte
    body_timeout_s: float = 120.0  # a request's whole body, once its headers are in
    # Bodies at least this large are parsed and rendered on a worker thread, so one huge
    # request does not hold the event loop (and every other call) while it is decoded.
    offload_bytes: int = 1 << 20
    # Images given by http(s) URL: fetched only when allowed (a sandboxed agent must not
    # make the gateway reach arbitrary addresses), each within a size and a time limit.
    fetch_image_urls: bool = False
    image_fetch_max_bytes: int = 20 << 20
    image_fetch_timeout_s: float = 10.0
