"""``sandboxd``: the small HTTP server inside a container or pod that runs execs and moves files.

Run as ``python -m openforge.sandboxes.sandboxd --port P --token T`` (or with the token in
``$OPENFORGE_SANDBOXD_TOKEN`` / ``--token-file``, as a Kubernetes Secret provides it). Exec
and file traffic goes straight to the sandbox, never through the Kubernetes API server.

Wire format (every route but ``/health`` needs ``Authorization: Bearer <token>``)::

    GET  /health                 {"ok": true}
    POST /exec                   {"cmd": [..] | "sh string", "env": {}, "cwd": str | null,
                                  "timeout": float | null, "stdin": base64 | null}
         -> application/x-ndjson lines: {"stream": "stdout"|"stderr", "data": base64} ...
            then {"exit_code": int, "timed_out": bool} or {"error": str}
    POST /files/put              {"files": {path: base64}}          -> {"ok": true}
    POST /files/get              {"paths": [path, ...]}             -> {"files": {path: base64}}
    POST /procs/mark             {}   -> {"marked": n}   the processes running now are the
                                      environment's (a task's services): /procs/reap spares them
    POST /procs/reap             {}   -> {"killed": n}   SIGKILL every other process (what an
                                      agent left running), but sandboxd and its ancestors
    POST /verify                 a verifier run (``sandboxd_verify.py``) -> its result

Errors are ``{"error": {"type": str, "message": str}}`` with 400 (bad request, path escape),
401 (token) or 500.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hmac
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from openforge.sandboxes.fspaths import PathEscape, read_files, write_files
from openforge.sandboxes.procs import ProcessId, kill_leftovers, process_ids, run_streaming
from openforge.sandboxes.runtime import SANDBOX_WORKDIR
from openforge.sandboxes.sandboxd_verify import parse_verify, run_verify

__all__ = ["TOKEN_ENV", "build_app", "main"]

TOKEN_ENV = "OPENFORGE_SANDBOXD_TOKEN"


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status)


class _BearerAuth:
    """Pure ASGI middleware: every path but /health needs the sandbox's token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await _error(401, "unauthorized", "missing or wrong bearer token")(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_tree(pid: int) -> None:
    # The process group catches most of the tree; a walk of /proc catches children that
    # started their own session (setsid) while their parent still lives.
    doomed = _descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for child in [pid, *doomed]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return body


def build_app(token: str, workdir: str, home: str, own_pid_namespace: bool = False) -> ASGIApp:
    """The sandboxd ASGI app serving ``workdir``, ``home`` and /tmp. ``own_pid_namespace``:
    it runs in its container's own process namespace (``main``), so a verifier run may be
    preceded by killing every process started since the mark; an app built in a test
    process must not (the host's other processes are not an agent's)."""
    daemon = _Daemon(workdir, home, own_pid_namespace)
    app = Starlette(
        routes=[
            Route("/health", daemon.health),
            Route("/exec", daemon.exec_, methods=["POST"]),
            Route("/verify", daemon.verify, methods=["POST"]),
            Route("/procs/mark", daemon.mark, methods=["POST"]),
            Route("/procs/reap", daemon.reap, methods=["POST"]),
            Route("/files/put", daemon.put, methods=["POST"]),
            Route("/files/get", daemon.get, methods=["POST"]),
        ]
    )
    return _BearerAuth(app, token)


@dataclass(frozen=True, slots=True)
class _Exec:
    """An exec request, checked."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    timeout: float | None
    stdin: bytes | None


class _Daemon:
    """What sandboxd's routes share: the roots it serves, the environment execs start
    with, and the processes marked as the environment's (``/procs/mark``)."""

    def __init__(self, workdir: str, home: str, own_pid_namespace: bool) -> None:
        self.workdir, self.home = workdir, home
        self.roots = {workdir: Path(workdir), home: Path(home), "/tmp": Path("/tmp")}
        self.base_env = {**os.environ, "HOME": home}
        self.base_env.pop(TOKEN_ENV, None)
        self.own_pid_namespace = own_pid_namespace
        self.marked: set[ProcessId] = process_ids()

    async def health(self, _: Request) -> Response:
        return JSONResponse({"ok": True})

    def _exec(self, body: dict[str, Any]) -> _Exec:
        cmd = body["cmd"]
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv:
            raise ValueError("cmd is empty")
        env = {**self.base_env, **{str(k): str(v) for k, v in (body.get("env") or {}).items()}}
        cwd = os.path.normpath(os.path.join(self.workdir, body.get("cwd") or "."))
        timeout = float(body["timeout"]) if body.get("timeout") is not None else None
        stdin = base64.b64decode(body["stdin"]) if body.get("stdin") is not None else None
        return _Exec(argv, env, cwd, timeout, stdin)

    async def exec_(self, request: Request) -> Response:
        try:
            run = self._exec(await _json(request))
        except (KeyError, ValueError, TypeError) as exc:
            return _error(400, "invalid_request", f"bad exec request: {exc!r}")
        return StreamingResponse(_exec_lines(run), media_type="application/x-ndjson")

    async def put(self, request: Request) -> Response:
        try:
            body = await _json(request)
            files = {str(p): base64.b64decode(d) for p, d in body["files"].items()}
            await asyncio.to_thread(write_files, files, self.roots, self.workdir, self.home)
        except PathEscape as exc:
            return _error(400, "path_escape", str(exc))
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            return _error(400, "invalid_request", f"bad put request: {exc!r}")
        except OSError as exc:
            return _error(500, "io_error", str(exc))
        return JSONResponse({"ok": True})

    async def get(self, request: Request) -> Response:
        try:
            body = await _json(request)
            paths = [str(p) for p in body["paths"]]
            found = await asyncio.to_thread(read_files, paths, self.roots, self.workdir, self.home)
        except PathEscape as exc:
            return _error(400, "path_escape", str(exc))
        except (KeyError, ValueError, TypeError) as exc:
            return _error(400, "invalid_request", f"bad get request: {exc!r}")
        except OSError as exc:
            return _error(500, "io_error", str(exc))
        return Response(
            orjson.dumps({"files": {p: base64.b64encode(d).decode() for p, d in found.items()}}),
            media_type="application/json",
        )

    async def mark(self, _: Request) -> Response:
        self.marked.clear()
        self.marked.update(await asyncio.to_thread(process_ids))
        return JSONResponse({"marked": len(self.marked)})

    async def reap(self, _: Request) -> Response:
        killed = await asyncio.to_thread(kill_leftovers, set(self.marked))
        return JSONResponse({"killed": killed})

    def kill_agent(self) -> int:
        return kill_leftovers(set(self.marked)) if self.own_pid_namespace else 0

    async def verify(self, request: Request) -> Response:
        try:
            run = parse_verify(await _json(request))
        except (KeyError, ValueError, TypeError) as exc:
            return _error(400, "invalid_request", f"bad verify request: {exc!r}")
        try:
            answer = await run_verify(run, self.workdir, self.home, self.kill_agent, _kill_tree)
        except OSError as exc:
            return _error(500, "io_error", f"cannot prepare the verifier: {exc}")
        return Response(orjson.dumps(answer), media_type="application/json")


async def _exec_lines(run: _Exec) -> AsyncIterator[bytes]:
    """The exec's output as ndjson lines, then its end; a client that goes away (the
    iteration stops) cancels the exec, and run_streaming kills its tree."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    def on_output(stream: str, chunk: bytes) -> None:
        line = {"stream": stream, "data": base64.b64encode(chunk).decode()}
        queue.put_nowait(orjson.dumps(line) + b"\n")

    async def execute() -> None:
        try:
            result = await run_streaming(
                run.argv, env=run.env, cwd=run.cwd, stdin=run.stdin, timeout=run.timeout,
                on_output=on_output, kill=_kill_tree,
            )  # fmt: skip
            end: dict[str, object] = {
                "exit_code": result.exit_code,
                "timed_out": result.timed_out,
            }
        except OSError as exc:
            end = {"error": f"cannot start {run.argv[0]!r}: {exc}"}
        queue.put_nowait(orjson.dumps(end) + b"\n")
        queue.put_nowait(None)

    task = asyncio.create_task(execute())
    try:
        while (line := await queue.get()) is not None:
            yield line
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        sys.exit(f"sandboxd: no token: pass --token, --token-file or set ${TOKEN_ENV}")
    return token


def main(argv: list[str] | None = None) -> None:
    """Parse flags and serve until SIGTERM; prints ``{"port": N}`` once listening."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="sandboxd", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--uds", help="serve on this Unix socket instead of TCP")
    parser.add_argument("--token")
    parser.add_argument("--token-file")
    parser.add_argument("--workdir", default=SANDBOX_WORKDIR)
    parser.add_argument("--home", default=os.environ.get("HOME", "/root"))
    parser.add_argument("--gateway-port", type=int, help="relay 127.0.0.1:PORT inside ...")
    parser.add_argument("--gateway-socket", help="... to this Unix socket (the host's relay)")
    args = parser.parse_args(argv)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    Path(args.home).mkdir(parents=True, exist_ok=True)
    if args.uds:
        # A Unix socket in a directory the host bind-mounts: the host reaches sandboxd even
        # when the sandbox has no network at all.
        Path(args.uds).unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(args.uds)
        os.chmod(args.uds, 0o600)
        print(orjson.dumps({"uds": args.uds}).decode(), flush=True)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        print(orjson.dumps({"port": sock.getsockname()[1]}).decode(), flush=True)
    app = build_app(_token(args), args.workdir, args.home, own_pid_namespace=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    asyncio.run(_serve(uvicorn.Server(config), sock, args.gateway_port, args.gateway_socket))


async def _serve(server: Any, sock: socket.socket, port: int | None, uds: str | None) -> None:
    relay = None
    if port and uds:
        # network="gateway" in a container without a network: the gateway's port on this
        # loopback leads to the host's relay socket (bind-mounted), and nowhere else.
        from openforge.sandboxes.gateway_relay import GatewayRelay

        relay = GatewayRelay(None, upstream_uds=uds)
        await relay.serve_tcp("127.0.0.1", port)
    try:
        await server.serve(sockets=[sock])
    finally:
        if relay is not None:
            await relay.close()


if __name__ == "__main__":
    main()
