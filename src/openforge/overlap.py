"""How much two byte strings share at their start or end, compared in C without copies.

``bytes.startswith``/``endswith`` take any bytes-like argument and run one ``memcmp``; given
a ``memoryview`` slice they compare in place, where ``a[:n] == b[:n]`` would first copy
both slices. One comparison in the common case of one string extending the other, a
bisection over ~2n bytes otherwise. The store's deltas and the dialects' recognition of a
resent body ask this of bodies up to megabytes, on every call.
"""

from __future__ import annotations

__all__ = ["shared_prefix", "shared_suffix"]


def shared_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share."""
    if len(a) > len(b):
        a, b = b, a
    if b.startswith(a):
        return len(a)
    view = memoryview(a)
    lo, hi = 0, len(a)  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(view[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


def shared_suffix(a: bytes, b: bytes, limit: int) -> int:
    """How many trailing bytes ``a`` and ``b`` share, at most ``limit``."""
    la, lb = len(a), len(b)
    n = max(min(la, lb, limit), 0)
    view = memoryview(a)
    if b.endswith(view[la - n :]):
        return n
    lo, hi = 0, n  # the last lo bytes are shared, the last hi are not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.endswith(view[la - mid : la - lo], 0, lb - lo):
            lo = mid
        else:
            hi = mid
    return lo
