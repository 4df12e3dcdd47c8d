"""A task's services and MCP bridge, set up in its sandbox around the harness.

:class:`TaskServices` is a :class:`openforge.tasks.model.TaskEnvironment`: ``prepare`` copies
the service code and fixtures (named by the task, read from the user's checkout), the
supervisor and the bridge into the sandbox under :data:`ROOT`; ``wrap`` turns the harness's
launch into ``supervisor.py SPEC -- launch…`` so that the services run, health-checked,
in the harness's own process tree and network namespace, and their audits are saved when it
exits. The sandbox side runs on the environments Python that
``scripts/install-environments.sh`` installs (the ``mcp`` SDK, FastAPI, uvicorn).

Files the sandbox ends with, read by the task's grader: :data:`DISPATCH_LOG` (one JSON line
per tool call), :data:`AUDIT_FILE` (each service's ``/audit``), :data:`STATUS_FILE`
(``{"ok": false, "error": …}`` when a service did not start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from openforge.sandboxes.base import Sandbox

__all__ = [
    "AUDIT_FILE",
    "DISPATCH_LOG",
    "ENV_PYTHON",
    "ROOT",
    "STATUS_FILE",
    "Service",
    "TaskServices",
    "ToolRoute",
]

ENV_PYTHON = "/opt/openforge/environments/bin/python"
ROOT = "/tmp/openforge-env"
DISPATCH_LOG = f"{ROOT}/dispatches.jsonl"
AUDIT_FILE = f"{ROOT}/audit.json"
STATUS_FILE = f"{ROOT}/status.json"
_HERE = Path(__file__).parent
_BRIDGE = f"{ROOT}/mcp_bridge.py"
_SUPERVISOR = f"{ROOT}/supervisor.py"
_TOOLS_SPEC = f"{ROOT}/tools.json"
_SERVICES_SPEC = f"{ROOT}/services.json"
_CHECKOUT = f"{ROOT}/checkout"


@dataclass(frozen=True, slots=True)
class Service:
    """One service to run (ClawEval's ``ServiceDef``); paths in ``command``/``env`` are
    relative to the copied checkout."""

    name: str
    command: str
    health_check: str
    health_check_method: str = "POST"
    ready_timeout: float = 10.0
    reset_endpoint: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolRoute:
    """A tool the model sees and the HTTP endpoint its calls go to."""

    name: str
    description: str
    input_schema: dict[str, Any]
    url: str
    method: str = "POST"


@dataclass(frozen=True, slots=True)
class TaskServices:
    """The services, the files they need and the tools routed to them, for one task."""

    services: tuple[Service, ...]
    tools: tuple[ToolRoute, ...]
    files: dict[str, Path]  # checkout-relative path -> host file (service code, fixtures)
    python: str = ENV_PYTHON

    def bridge_command(self) -> tuple[str, ...]:
        """The stdio MCP server, as a harness starts it."""
        return (self.python, _BRIDGE, "serve", _TOOLS_SPEC)

    def bridge_call(self) -> tuple[str, ...]:
        """One call (tool name appended, arguments as JSON on stdin), as the claw agent runs it."""
        return (self.python, _BRIDGE, "call", _TOOLS_SPEC)

    async def prepare(self, sandbox: Sandbox) -> None:
        """Copy the service code and fixtures, the bridge, the supervisor and their specs in."""
        tools = {
            "log": DISPATCH_LOG,
            "tools": [
                {
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                    "url": t.url,
                    "method": t.method,
                }
                for t in self.tools
            ],
        }
        services = {
            "cwd": _CHECKOUT,
            "status": STATUS_FILE,
            "audit": AUDIT_FILE,
            "services": [
                {
                    "name": s.name,
                    "command": s.command,
                    "env": s.env,
                    "health_check": s.health_check,
                    "health_check_method": s.health_check_method,
                    "ready_timeout": s.ready_timeout,
                    "reset_endpoint": s.reset_endpoint,
                }
                for s in self.services
            ],
        }
        files = {f"{_CHECKOUT}/{rel}": p.read_bytes() for rel, p in self.files.items()}
        files[_BRIDGE] = (_HERE / "mcp_bridge.py").read_bytes()
        files[_SUPERVISOR] = (_HERE / "supervisor.py").read_bytes()
        files[_TOOLS_SPEC] = orjson.dumps(tools)
        files[_SERVICES_SPEC] = orjson.dumps(services)
        files[DISPATCH_LOG] = b""
        await sandbox.put(files)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by the supervisor, with the services up around it."""
        return [self.python, _SUPERVISOR, _SERVICES_SPEC, "--", *argv]
