"""Inside a local sandbox with ``network="gateway"``: 127.0.0.1:PORT → the gateway's Unix socket.

Run by the system ``python3 -I -S`` as the first program of each exec, in the sandbox's own
network namespace (where only a private loopback exists)::

    python3 -I -S gateway_forwarder.py PORT SOCKET CMD [ARG...]

It binds ``127.0.0.1:PORT`` *before* the command starts (so the harness never races the
listener), hands the listener to a detached grandchild that relays each connection to
``SOCKET`` (bind-mounted from the host, where the backend relays it on to the gateway),
then ``exec``\\ s the command in its own process: the command keeps its pid, exit status and
stdio, and has no extra child to ``wait`` for. The forwarder dies with the sandbox's PID
namespace when the command exits. Bytes are passed on as they arrive (a streamed SSE
response is never held back). Standard library only: it runs on the host's system Python.
"""

from __future__ import annotations

# The low-level modules on purpose: ``socket`` and ``threading`` pull in enum, selectors and
# collections, which doubles this program's start-up, paid on every exec.
import _socket
import _thread
import os
import sys

_CHUNK = 65536


def _pipe(src: _socket.socket, dst: _socket.socket, last: bool) -> None:
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    if last:  # the upstream side ended: the exchange is over
        src.close()
        dst.close()
        return
    try:  # noqa: SIM105 - contextlib is one more import on every exec's start
        dst.shutdown(_socket.SHUT_WR)  # pass the client's half-close on
    except OSError:
        pass


def _serve(listener: _socket.socket, path: str) -> None:
    while True:
        fd, _ = listener._accept()  # type: ignore[attr-defined]
        conn = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
        conn.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        up = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            up.connect(path)
        except OSError:
            conn.close()
            up.close()
            continue
        _thread.start_new_thread(_pipe, (conn, up, False))
        _thread.start_new_thread(_pipe, (up, conn, True))


def main(argv: list[str]) -> None:
    """Bind the port, detach the relay, exec the command (never returns)."""
    port, path, cmd = int(argv[0]), argv[1], argv[2:]
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(256)
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            os.setsid()  # out of the command's process group: `kill 0` there spares it
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)  # never hold the exec's output pipes open
            try:
                _serve(listener, path)
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    listener.close()
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"openforge: cannot run {cmd[0]}: {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv[1:])
