"""The MCP bridge: a task's HTTP tools offered to any harness, every dispatch logged.

Shipped into the sandbox as a zipapp and run there with the environments Python
(``scripts/install-environments.sh``). Two front doors onto one dispatch:

- ``mcp_bridge.pyz serve SPEC``: a stdio MCP server (the official ``mcp`` SDK) listing the
  task's tools; Claude Code, Codex and OpenClaw start it from their own MCP configuration.
- ``mcp_bridge.pyz call SPEC NAME`` (arguments as JSON on stdin): one call, its result on
  stdout; the built-in claw agent calls tools this way (standard library only).

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


def main(argv: list[str]) -> int:
    """``serve SPEC`` or ``call SPEC NAME``."""
    if len(argv) >= 2 and argv[0] == "serve":
        serve(_load(argv[1]))
        return 0
    if len(argv) >= 3 and argv[0] == "call":
        raw = sys.stdin.read().strip()
        args = json.loads(raw) if raw else {}
        _, text = dispatch(_load(argv[1]), argv[2], args if isinstance(args, dict) else {})
        print(text)
        return 0
    print("usage: mcp_bridge.pyz serve SPEC | call SPEC NAME", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
