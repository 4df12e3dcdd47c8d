"""Several gateway worker processes on one port (``openforge gateway --workers N``).

One Python process serves from one core: its own work per call (parse, render, record)
holds the GIL. To use more cores, the parent binds the model and admin listeners once and
forks N workers; each builds its own engine client, tokenizer and store connection after
the fork (nothing with threads crosses it) and accepts on the shared sockets, so the
kernel hands each new connection to whichever worker accepts first. Each worker is
pinned to one core of the parent's CPU set (round robin) when there is more than one.

A rollout's calls may then reach any worker (a harness's keep-alive connection stays on
one, a new connection may land on another), so workers are replicas in the sense of
docs/store.md: they need the shared PostgreSQL store, where sequence numbers are allocated
in the database, a worker that sees a sequence past the one it expected rebuilds that
rollout's history from the store first, and pause, resume and weight versions announced
on one worker reach the others by LISTEN/NOTIFY.

The parent only waits: SIGTERM or SIGINT is passed to every worker, and when one worker
exits the others are stopped and the parent exits with that worker's status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable

__all__ = ["run_workers"]


def _pin(index: int) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) > 1:
        os.sched_setaffinity(0, {allowed[index % len(allowed)]})


def run_workers(
    n: int,
    sockets: tuple[socket.socket, socket.socket],
    serve_one: Callable[[int, tuple[socket.socket, socket.socket]], None],
) -> int:
    """Fork ``n`` workers, each running ``serve_one(index, sockets)`` until it returns;
    returns the exit status of the first worker to end (after stopping the rest)."""
    children: list[int] = []
    for index in range(n):
        pid = os.fork()
        if pid == 0:  # the worker
            status = 0
            try:
                _pin(index)
                serve_one(index, sockets)
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                import traceback

                traceback.print_exc()
                status = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        children.append(pid)

    asked: list[int] = []  # the signals this parent was sent and passed on

    def send(signum: int) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    def forward(signum: int, _frame: object) -> None:
        asked.append(signum)
        send(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    _, status = os.wait()
    send(signal.SIGTERM)
    for child in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    # uvicorn re-raises the signal it caught once it has shut down, so a worker stopped
    # as asked can end by that signal: a clean stop all the same.
    return 0 if -code in asked else code
