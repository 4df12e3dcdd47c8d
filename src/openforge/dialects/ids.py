"""Ids minted for answers and tool calls, in each provider's style.

Response ids are handles a harness sends back (``previous_response_id``), so they must not
be guessable: each carries 128 random bits. Random bytes are drawn from the OS in blocks,
because one ``urandom`` call per id is measurable on the gateway's hot path.
"""

from __future__ import annotations

import os
import threading

__all__ = ["new_id"]

_BLOCK = 16 * 256  # 256 ids per OS call
_lock = threading.Lock()
_pool = b""


def new_id(prefix: str) -> str:
    """A fresh id: ``prefix`` and 32 hex characters (128 random bits)."""
    global _pool
    with _lock:
        if not _pool:
            _pool = os.urandom(_BLOCK)
        chunk, _pool = _pool[:16], _pool[16:]
    return prefix + chunk.hex()
