"""Open a listening socket inside another process's network namespace (``setns``).

With ``CAP_SYS_ADMIN`` (OpenForge running as root, or in a user namespace it owns) the
local backend makes the gateway's port inside a sandbox's own network namespace from the
host process: ``setns`` the calling thread into the namespace, create and bind a socket,
``setns`` back. The socket stays in that namespace; connections to it are accepted and
relayed by the host's event loop, so no relay process runs inside the sandbox. Python 3.11
has no ``os.setns``: the libc function is called through ctypes. Nothing awaits between the
two ``setns`` calls, so the event loop's thread is back in its own namespace before any
other code runs on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket

__all__ = ["can_setns", "listen_in"]

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def can_setns() -> bool:
    """Whether this process may enter network namespaces (re-entering its own is the probe)."""
    try:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        _setns(own)
        return True
    except OSError:
        return False
    finally:
        os.close(own)


def listen_in(pid: int, port: int, backlog: int = 256) -> socket.socket:
    """A non-blocking TCP socket listening on ``port`` (all addresses) in ``pid``'s netns.

    It binds the wildcard address because the namespace's loopback may not be up yet when
    this runs (bubblewrap raises it later); the namespace has no other interface.
    """
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            finally:
                _setns(own)  # if this fails the process is unusable: let it raise
        finally:
            os.close(target)
    finally:
        os.close(own)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        with contextlib.suppress(OSError):
            sock.close()
        raise
    return sock
