"""Giving memory back to the OS after very large requests.

glibc's allocator keeps freed memory in its arenas: after one 50 MB request (its body, the
parsed conversation, the rendered ids) the process stayed gigabytes larger for good. Once such
a request is over, ``malloc_trim(0)`` returns the free pages; elsewhere (musl, macOS) there is
nothing to call and this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging

__all__ = ["release_free_memory"]

_log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def _trim() -> None:
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def release_free_memory() -> None:
    """Return free heap pages to the OS, on a worker thread (it walks the whole heap)."""
    task = asyncio.get_running_loop().create_task(asyncio.to_thread(_trim))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


_pending: set[asyncio.Task[None]] = set()  # keeps the tasks alive until they finish
