"""Child processes that end with the process that started them.

A training run starts long-lived children (a gateway holding ports, a store and
gigabytes of engine; bench workers training a seed each). When the parent dies, even by
SIGKILL (an OOM kill, a user's ``kill``), the kernel sends each such child SIGTERM, a
graceful stop; otherwise they live on, holding the machine's memory and cores.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

__all__ = ["end_with_parent", "exit_with_parent"]

_PR_SET_PDEATHSIG = 1  # prctl(2) option, <linux/prctl.h>


def end_with_parent(parent: int) -> None:
    """In a child of ``parent``: SIGTERM when ``parent`` dies (Linux; elsewhere nothing).

    Exits at once when ``parent`` is already gone (the child outlived it before this ran)."""
    if sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def exit_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that runs :func:`end_with_parent` in the child (None off Linux)."""
    if sys.platform != "linux":
        return None
    return lambda: end_with_parent(parent)
