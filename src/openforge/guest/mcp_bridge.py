"""The MCP bridge: a task's HTTP tools offered to any harness, every dispatch logged.

Shipped into the sandbox as a zipapp and run there with the environments Python
(``scripts/install-environments.sh``). Two front doors onto one dispatch:

- ``mcp_bridge.pyz serve SPEC``: a stdio MCP server (the official ``mcp`` SDK) listing the
  task's tools; Claude Code, Codex and OpenClaw start it from their own MCP configuration.
- ``mcp_bridge.pyz call SPEC NAME`` (arguments as JSON on stdin): one call, its result on
  stdout; the built-in claw agent calls tools this way (standard library only).
- ``mcp_bridge.py relay URL``: a task's own MCP server (Harbor's ``[[environment.mcp_servers]]``
  over ``streamable-http``) offered as a stdio one, so every harness that starts stdio servers
  reaches it. Standard library only (it runs on OpenForge's runtime Python in the task's
  image): each JSON-RPC line from stdin is POSTed to ``URL`` with the session id the server
  gave, and what the server answers (JSON, or the ``data`` of its event stream) goes to
  stdout, one message a line. Requests are relayed concurrently (a slow tool holds no other).

``SPEC`` is JSON ``{"log": PATH, "tools": [{name, description, input_schema, url,
method}]}``. A dispatch sends the arguments as the JSON body to the tool's endpoint, as
ClawEval's dispatcher does, and appends ``{tool_use_id, tool_name, endpoint_url,
request_body, response_status, response_body, latency_ms}`` to the log, one JSON line per
call, under an exclusive lock (calls may run in parallel).
"""

from __future__ import annotations

import fcntl
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

# Mock services listen on the sandbox's loopback: never send their traffic to a proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _load(spec_path: str) -> dict[str, Any]:
    with open(spec_path, encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    return spec


def _log(path: str, record: dict[str, Any]) -> None:
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = sum(1 for _ in f)
        record = {"tool_use_id": f"mcp-{n + 1}", **record}
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()


def dispatch(spec: dict[str, Any], name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """Call tool ``name``; return (is_error, the result text the model sees)."""
    tool = next((t for t in spec["tools"] if t["name"] == name), None)
    url = tool.get("url", "") if tool else ""
    t0 = time.monotonic()
    status, body = 404, {"error": f"unknown tool '{name}'"}
    if tool is not None and url:
        req = urllib.request.Request(
            url,
            data=json.dumps(arguments).encode(),
            method=tool.get("method", "POST"),
            headers={"Content-Type": "application/json"},
        )
        try:
            with _OPENER.open(req, timeout=60) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            status, raw = 500, json.dumps({"error": str(exc)}).encode()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"error": raw.decode(errors="replace")}
    _log(
        spec["log"],
        {
            "tool_name": name,
            "endpoint_url": url,
            "request_body": arguments,
            "response_status": status,
            "response_body": body,
            "latency_ms": (time.monotonic() - t0) * 1000,
        },
    )
    return status >= 400, json.dumps(body, ensure_ascii=False)


def serve(spec: dict[str, Any]) -> None:
    """Serve the tools over stdio MCP until the harness closes the pipe."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    server: Server[Any, Any] = Server("openforge-task-tools")

    @server.list_tools()  # type: ignore[untyped-decorator,no-untyped-call]
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(
                name=t["name"],
                description=t.get("description", ""),
                inputSchema=t.get("input_schema") or {"type": "object", "properties": {}},
            )
            for t in spec["tools"]
        ]

    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        is_error, text = await anyio.to_thread.run_sync(dispatch, spec, name, arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], isError=is_error
        )

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


class _Relay:
    """One stdio session relayed to a streamable-http MCP server."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session: str | None = None
        self.lock = threading.Lock()  # stdout, and the session id

    def emit(self, payload: str) -> None:
        payload = payload.strip()
        if not payload:
            return
        with self.lock:
            sys.stdout.write(payload.replace("\n", " ") + "\n")
            sys.stdout.flush()

    def error(self, message: dict[str, Any], text: str) -> None:
        if "id" in message and "method" in message:  # a request: answer it, never hang
            err = {"code": -32000, "message": f"task MCP server: {text}"}
            self.emit(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": err}))

    def send(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}  # fmt: skip
        with self.lock:
            if self.session is not None:
                headers["Mcp-Session-Id"] = self.session
        req = urllib.request.Request(self.url, data=line.encode(), headers=headers, method="POST")
        try:
            with _OPENER.open(req, timeout=600) as resp:
                sid = resp.headers.get("Mcp-Session-Id")
                if sid:
                    with self.lock:
                        self.session = sid
                if "text/event-stream" in resp.headers.get("Content-Type", ""):
                    self._events(resp)
                else:
                    self.emit(resp.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            self.error(message, f"HTTP {exc.code}: {exc.read()[:500].decode(errors='replace')}")
        except (urllib.error.URLError, OSError) as exc:
            self.error(message, str(exc))

    def _events(self, resp: Any) -> None:
        data: list[str] = []
        for raw in resp:
            line = raw.decode(errors="replace").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                self.emit("\n".join(data))
                data = []
        if data:
            self.emit("\n".join(data))


def relay(url: str) -> None:
    """Relay stdio JSON-RPC to ``url`` until stdin closes and every answer is out."""
    session = _Relay(url)
    threads = []
    for line in sys.stdin:
        if '"initialize"' in line and json.loads(line).get("method") == "initialize":
            session.send(line.strip())  # the session id comes with its answer: wait for it
        elif line.strip():
            t = threading.Thread(target=session.send, args=(line.strip(),), daemon=True)
            t.start()
            threads.append(t)
    for t in threads:
        t.join()


def main(argv: list[str]) -> int:
    """``serve SPEC``, ``call SPEC NAME`` or ``relay URL``."""
    if len(argv) >= 2 and argv[0] == "relay":
        relay(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "serve":
        serve(_load(argv[1]))
        return 0
    if len(argv) >= 3 and argv[0] == "call":
        raw = sys.stdin.read().strip()
        args = json.loads(raw) if raw else {}
        _, text = dispatch(_load(argv[1]), argv[2], args if isinstance(args, dict) else {})
        print(text)
        return 0
    print("usage: mcp_bridge.pyz serve SPEC | call SPEC NAME | relay URL", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
