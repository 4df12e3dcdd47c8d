"""Run one process with streamed output, a timeout and a whole-tree kill; end what an
agent left running.

Shared by the local backend (the process is ``bwrap``) and by ``sandboxd`` (the process is
the command itself, in its own process group). :func:`kill_leftovers` is sandboxd's: in a
container every exec shares one process namespace, so a process an agent started in the
background (``setsid``, a double fork) outlives its exec and could rewrite the reward's
evidence while the verifier runs. The local backend needs none: each exec has its own
process namespace, whose processes all die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from openforge.sandboxes.base import ExecResult, OutputCallback

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "ProcessId",
    "exit_code_of",
    "kill_leftovers",
    "process_ids",
    "process_start",
    "run_streaming",
    "wait_gone",
]

# What one exec keeps in memory per stream; the callback still sees every byte.
DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024
_CHUNK = 64 * 1024


def exit_code_of(returncode: int) -> int:
    """A shell-style exit code: a process killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def process_start(pid: int) -> str | None:
    """Process ``pid``'s start time (guards against pid reuse), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time


async def wait_gone(pid: int, limit_s: float = 5.0) -> None:
    """Wait (at most ``limit_s``) until ``pid`` is gone or a zombie."""
    # bwrap's PID-1 dies of its parent-death signal, asynchronously; once it is gone (or a
    # zombie) the kernel has killed every process of its namespace.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while loop.time() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):
            return
        await asyncio.sleep(0.005)


def _kill_group(pid: int) -> None:
    # start_new_session made the child a group leader; killing the group reaches every
    # descendant that did not start its own session (sandboxes handle those by namespace).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _pump(
    stream: asyncio.StreamReader,
    name: str,
    sink: bytearray,
    limit: int,
    on_output: OutputCallback | None,
) -> None:
    while chunk := await stream.read(_CHUNK):
        if len(sink) < limit:
            sink += chunk[: limit - len(sink)]
        if on_output is not None:
            maybe = on_output(name, chunk)
            if inspect.isawaitable(maybe):
                await maybe


def _same(protocol: asyncio.StreamReaderProtocol) -> asyncio.StreamReaderProtocol:
    return protocol


class _OwnedPipes:
    """Stdio pipes owned by another uid: the child's ends, and the parent's streams.

    A process that runs as another uid than ours cannot reopen pipes we made (mode 0600,
    ours): ``echo x > /dev/stderr`` goes through /proc/self/fd and fails with EACCES. Both
    ends of a pipe share one inode, so chowning it before the fork settles it for good.
    """

    def __init__(self, with_stdin: bool, owner: tuple[int, int]) -> None:
        self._pipes = [os.pipe() for _ in range(3 if with_stdin else 2)]
        for r, _ in self._pipes:
            os.fchown(r, *owner)
        # The child's stdout, stderr, stdin ends; closed here once it has them.
        self.child = [self._pipes[0][1], self._pipes[1][1]]
        if with_stdin:
            self.child.append(self._pipes[2][0])
        self._transports: list[asyncio.BaseTransport] = []

    async def streams(
        self,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamReader, asyncio.StreamWriter | None]:
        """The parent's stdout and stderr readers and stdin writer."""
        loop = asyncio.get_running_loop()
        readers: list[asyncio.StreamReader] = []
        for r, _ in self._pipes[:2]:
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.connect_read_pipe(
                functools.partial(_same, protocol), os.fdopen(r, "rb", 0)
            )
            self._transports.append(transport)
            readers.append(reader)
        writer = None
        if len(self._pipes) == 3:
            w = self._pipes[2][1]
            wt, wp = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, os.fdopen(w, "wb", 0)
            )
            self._transports.append(wt)
            writer = asyncio.StreamWriter(wt, wp, None, loop)
        return readers[0], readers[1], writer

    def close_child_ends(self) -> None:
        """Close the ends the child inherited (after the fork)."""
        for fd in self.child:
            os.close(fd)
        self.child = []

    def close(self) -> None:
        """Close our ends (a process that outlived the kill keeps none of our fds busy)."""
        self.close_child_ends()
        for t in self._transports:
            t.close()


async def run_streaming(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,
    on_output: OutputCallback | None = None,
    max_output: int = DEFAULT_MAX_OUTPUT,
    kill: Callable[[int], None] | None = None,
    pass_fds: Sequence[int] = (),
    on_start: Callable[[int], None] | None = None,
    pipe_owner: tuple[int, int] | None = None,
    run_as: tuple[int, int] | None = None,
) -> ExecResult:
    """Run ``argv`` in a new session; stream its output; kill its whole tree on timeout.

    ``kill(pid)`` replaces the default process-group SIGKILL (the local backend also
    empties the sandbox's cgroup). Cancellation kills the tree too, then re-raises.
    ``pipe_owner`` (uid, gid): the stdio pipes belong to it (a process that drops to that
    uid can still open /dev/stdout). ``run_as`` (uid, gid): the process runs as them, with
    no supplementary groups (the caller must be root).
    """
    started = await _start(
        argv, env=env, cwd=cwd, with_stdin=stdin is not None, pass_fds=pass_fds,
        pipe_owner=pipe_owner, run_as=run_as,
    )  # fmt: skip
    proc, writer, owned = started.proc, started.writer, started.owned
    killer = kill or _kill_group
    if on_start is not None:
        on_start(proc.pid)
    out, err = bytearray(), bytearray()

    async def feed() -> None:
        if stdin is not None and writer is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                writer.write(stdin)
                await writer.drain()
            writer.close()

    async def run() -> int:
        await asyncio.gather(
            feed(),
            _pump(started.stdout, "stdout", out, max_output, on_output),
            _pump(started.stderr, "stderr", err, max_output, on_output),
        )
        return await proc.wait()

    timed_out = False
    try:
        code = await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        timed_out = True
        killer(proc.pid)
        code = await proc.wait()
    except BaseException:
        killer(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            await asyncio.shield(proc.wait())
        raise
    finally:
        if owned is not None:
            owned.close()
    return ExecResult(exit_code_of(code), bytes(out), bytes(err), timed_out)


@dataclass(frozen=True, slots=True)
class _Started:
    """A process just started: it, our ends of its stdio, and the pipes we made for it
    when they belong to another uid (closed once it has ended)."""

    proc: asyncio.subprocess.Process
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    writer: asyncio.StreamWriter | None
    owned: _OwnedPipes | None


async def _start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    with_stdin: bool,
    pass_fds: Sequence[int],
    pipe_owner: tuple[int, int] | None,
    run_as: tuple[int, int] | None,
) -> _Started:
    """Start ``argv`` in a new session with piped stdio (see :func:`run_streaming`)."""
    ids: dict[str, object] = {}
    if run_as is not None:
        ids = {"user": run_as[0], "group": run_as[1], "extra_groups": []}
    if pipe_owner is None:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if with_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            **ids,  # type: ignore[arg-type]
        )
        assert proc.stdout is not None and proc.stderr is not None
        return _Started(proc, proc.stdout, proc.stderr, proc.stdin, None)
    owned = _OwnedPipes(with_stdin, pipe_owner)
    try:
        stdout, stderr, writer = await owned.streams()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=owned.child[2] if with_stdin else asyncio.subprocess.DEVNULL,
            stdout=owned.child[0],
            stderr=owned.child[1],
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            **ids,  # type: ignore[arg-type]
        )
    except BaseException:
        owned.close()
        raise
    owned.close_child_ends()
    return _Started(proc, stdout, stderr, writer, owned)


# (pid, start time in clock ticks since boot): a pid alone may be reused.
ProcessId = tuple[int, int]
_ROUNDS = 50  # passes that stop new processes before the kill (a fork bomb keeps forking)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of ``pid`` from /proc, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _table() -> dict[int, tuple[str, int, int]]:
    table: dict[int, tuple[str, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            table[int(entry)] = st
    return table


def process_ids() -> set[ProcessId]:
    """Every live process of this process namespace, as :data:`ProcessId` s."""
    return {(pid, st[2]) for pid, st in _table().items()}


def _doomed(table: dict[int, tuple[str, int, int]], kept: set[ProcessId], me: int) -> list[int]:
    """The processes to end: not ``kept``, not ``me`` nor its ancestors, and not a descendant
    of a kept process other than those ancestors (a task service's own workers stay)."""
    roots = set()
    pid = me
    while pid > 0 and pid in table:
        roots.add(pid)
        pid = table[pid][1]
    doomed = []
    for pid, (state, _, start) in table.items():
        if pid in roots or (pid, start) in kept or state in ("Z", "X"):
            continue
        ancestor = table[pid][1]
        while ancestor in table and ancestor not in roots:
            if (ancestor, table[ancestor][2]) in kept:
                break
            ancestor = table[ancestor][1]
        if ancestor in roots or ancestor not in table:
            doomed.append(pid)
    return doomed


def kill_leftovers(kept: set[ProcessId], me: int | None = None) -> int:
    """SIGKILL every process not in ``kept`` that hangs off ``me`` (default: this process),
    its ancestors or init rather than off a kept process; the number killed.

    Each round stops what it finds first (SIGSTOP), so a process cannot fork faster than it
    is found; then all of them are killed at once.
    """
    me = os.getpid() if me is None else me
    stopped: set[int] = set()
    for _ in range(_ROUNDS):
        fresh = [p for p in _doomed(_table(), kept, me) if p not in stopped]
        if not fresh:
            break
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
            stopped.add(pid)
        time.sleep(0.001)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(stopped)
