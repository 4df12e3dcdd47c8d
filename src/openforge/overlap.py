"""How much two sequences share at their start or end, compared in C.

Slice comparisons run in C (``memcmp`` for bytes; an identity check first for ids): one
comparison in the common case of one sequence extending the other, a bisection over ~2n
items otherwise. The store's deltas and the dialects' recognition of a resent body both
ask this of bodies up to megabytes, on every call.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["shared_prefix", "shared_suffix"]

_S = TypeVar("_S", bytes, tuple[int, ...])


def shared_prefix(a: _S, b: _S) -> int:
    """How many leading items ``a`` and ``b`` share.

    Slice comparisons run in C (``memcmp`` for bytes; item by item, an identity check
    first, for tuples): one comparison in the common case of ``b`` extending ``a``, a
    bisection over ~2n items otherwise.
    """
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def shared_suffix(a: bytes, b: bytes, limit: int) -> int:
    """How many trailing bytes ``a`` and ``b`` share, at most ``limit``."""
    n = min(len(a), len(b), limit)
    la, lb = len(a), len(b)
    if a[la - n :] == b[lb - n :]:
        return n
    lo, hi = 0, n  # the last lo bytes are shared, the last hi are not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid
    return lo
