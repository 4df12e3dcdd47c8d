"""Run one process with streamed output, a timeout and a whole-tree kill.

Shared by the local backend (the process is ``bwrap``) and by ``sandboxd`` (the process is
the command itself, in its own process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
from collections.abc import Callable, Mapping, Sequence

from openforge.sandboxes.base import ExecResult, OutputCallback

__all__ = ["DEFAULT_MAX_OUTPUT", "exit_code_of", "run_streaming"]

# What one exec keeps in memory per stream; the callback still sees every byte.
DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024
_CHUNK = 64 * 1024


def exit_code_of(returncode: int) -> int:
    """A shell-style exit code: a process killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


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
) -> ExecResult:
    """Run ``argv`` in a new session; stream its output; kill its whole tree on timeout.

    ``kill(pid)`` replaces the default process-group SIGKILL (the local backend also
    empties the sandbox's cgroup). Cancellation kills the tree too, then re-raises.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    killer = kill or _kill_group
    if on_start is not None:
        on_start(proc.pid)
    out, err = bytearray(), bytearray()
    assert proc.stdout is not None and proc.stderr is not None

    async def feed() -> None:
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    async def run() -> int:
        await asyncio.gather(
            feed(),
            _pump(proc.stdout, "stdout", out, max_output, on_output),  # type: ignore[arg-type]
            _pump(proc.stderr, "stderr", err, max_output, on_output),  # type: ignore[arg-type]
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
    return ExecResult(exit_code_of(code), bytes(out), bytes(err), timed_out)
