"""Token-id containers kept out of the cyclic GC's walks.

A list or tuple of ints can never be part of a reference cycle, yet CPython's collector
walks it element by element: a tuple on the first young collection after it is made (which
then notices it holds only atomic values and stops tracking it), a list on every
collection of its generation for as long as it lives. A gateway makes such containers of
thousands of ids on every call (a prompt, the segments tokenized for it, which a
rollout's history keeps, each turn's ids), and at 256 calls in flight the young
collections that walked them paused the event loop for 25-210 ms (docs/gateway.md, "The
cyclic GC"). Untracking them when they are made, as the collector would do itself for the
tuples, leaves those collections the objects that can hold cycles.

Only containers that the code making them fills with ints (or floats) and nothing else are
passed here; one that later took a container would merely never be collected as part of a
cycle. ``PyObject_GC_UnTrack`` is CPython's C API; where there is no such API (another
Python) this does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TypeVar

__all__ = ["untracked"]

_Ids = TypeVar("_Ids", list[int], tuple[int, ...])


def _untrack_function() -> Callable[[object], None] | None:
    try:
        untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    except AttributeError:  # a Python without CPython's C API
        return None
    untrack.argtypes = [ctypes.py_object]
    untrack.restype = None
    return untrack


_untrack = _untrack_function()


def untracked(ids: _Ids) -> _Ids:
    """``ids``, no longer tracked by the cyclic GC (it holds ints only: no cycle can pass
    through it); returned so a container can be made and untracked in one expression."""
    if _untrack is not None:
        _untrack(ids)
    return ids
