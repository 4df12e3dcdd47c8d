"""A task's services and MCP bridge, set up in its sandbox around the harness.

:class:`TaskServices` is a :class:`openforge.tasks.model.TaskEnvironment`: ``prepare`` copies
the service code and fixtures (named by the task, read from the user's checkout), the
supervisor and the bridge into the sandbox under :data:`ROOT`; ``wrap`` turns the harness's
launch into ``supervisor.pyz SPEC -- launch…`` so that the services run, health-checked,
in the harness's own process tree and network namespace, and their audits are saved when it
exits. The sandbox side runs on the environments Python that
``scripts/install-environments.sh`` installs (the ``mcp`` SDK, FastAPI, uvicorn).

Files the sandbox ends with, read by the task's grader: :data:`DISPATCH_LOG` (one JSON line
per tool call), :data:`AUDIT_FILE` (each service's ``/audit``), :data:`STATUS_FILE`
(``{"ok": false, "error": …}`` when a service did not start).

The audit is the services' state, and a file the agent's uid can write: the supervisor signs
it (:data:`AUDIT_MAC`, HMAC-SHA256) with a key made per sandbox here, which it reads and
deletes before anything else starts and keeps in a process the agent cannot inspect (not
dumpable). :func:`verified_audit` gives the grader the audit only when the signature holds,
so an audit written by the agent (the supervisor killed before its own write) counts as none.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from openforge.guest import bundle
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import RT_PYTHON

__all__ = [
    "AUDIT_FILE",
    "AUDIT_MAC",
    "DISPATCH_LOG",
    "ENV_PYTHON",
    "ROOT",
    "STATUS_FILE",
    "McpRelay",
    "Service",
    "TaskServices",
    "ToolRoute",
    "verified_audit",
]

ENV_PYTHON = "/opt/openforge/environments/bin/python"
ROOT = "/tmp/openforge-env"
DISPATCH_LOG = f"{ROOT}/dispatches.jsonl"
AUDIT_FILE = f"{ROOT}/audit.json"
STATUS_FILE = f"{ROOT}/status.json"
AUDIT_MAC = f"{ROOT}/audit.mac"
_AUDIT_KEY = f"{ROOT}/audit.key"
# Each prepared sandbox's audit key, by sandbox id, until its grader takes it (bounded: a
# sandbox never graded must not hold memory for the run's life).
_KEYS: dict[str, bytes] = {}
_MAX_KEYS = 4096
_BRIDGE = f"{ROOT}/mcp_bridge.pyz"
_SUPERVISOR = f"{ROOT}/supervisor.pyz"
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
        return (self.python, "-I", _BRIDGE, "serve", _TOOLS_SPEC)

    def bridge_call(self) -> tuple[str, ...]:
        """One call (tool name appended, arguments as JSON on stdin), as the claw agent runs it."""
        return (self.python, "-I", _BRIDGE, "call", _TOOLS_SPEC)

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
            "audit_mac": AUDIT_MAC,
            "audit_key": _AUDIT_KEY,
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
        files[_BRIDGE] = bundle("mcp_bridge")
        files[_SUPERVISOR] = bundle("supervisor")
        files[_TOOLS_SPEC] = orjson.dumps(tools)
        files[_SERVICES_SPEC] = orjson.dumps(services)
        files[DISPATCH_LOG] = b""
        key = secrets.token_bytes(32)
        files[_AUDIT_KEY] = key.hex().encode()
        await sandbox.put(files)
        while len(_KEYS) >= _MAX_KEYS:
            _KEYS.pop(next(iter(_KEYS)))
        _KEYS[sandbox.id] = key

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by the supervisor, with the services up around it."""
        return [self.python, "-I", _SUPERVISOR, _SERVICES_SPEC, "--", *argv]


@dataclass(frozen=True, slots=True)
class McpRelay:
    """A task's own MCP server at ``url`` (Harbor's ``streamable-http`` ones), offered to
    harnesses as a stdio server: the bridge's ``relay``, run on OpenForge's runtime Python
    (every container sandbox has it; the task's image needs none)."""

    url: str
    python: str = RT_PYTHON

    def command(self) -> tuple[str, ...]:
        """The stdio MCP server, as a harness starts it."""
        return (self.python, "-I", _BRIDGE, "relay", self.url)

    async def prepare(self, sandbox: Sandbox) -> None:
        """Copy the bridge in."""
        await sandbox.put({_BRIDGE: bundle("mcp_bridge")})

    def wrap(self, argv: list[str]) -> list[str]:
        """The harness runs as launched: the server is the task's, already up."""
        return argv


def verified_audit(sandbox_id: str, audit: bytes | None, mac: bytes | None) -> bytes | None:
    """``audit`` when the supervisor of sandbox ``sandbox_id`` signed it, else None (takes
    the sandbox's key: ask once, after the harness has exited)."""
    key = _KEYS.pop(sandbox_id, None)
    if key is None or audit is None or mac is None:
        return None
    want = hmac.new(key, audit, hashlib.sha256).hexdigest().encode()
    return audit if hmac.compare_digest(want, mac.strip()) else None
