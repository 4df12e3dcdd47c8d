"""The ``claude-code`` harness: Anthropic's Claude Code CLI, unmodified, in print mode.

Configured the way its users configure it: ``ANTHROPIC_BASE_URL`` is the rollout's gateway
root (``…/r/<key>``; the SDK appends ``/v1/messages``), ``ANTHROPIC_API_KEY`` the rollout
key, and every model alias (main and small/fast) maps to the served model so side calls
land on the same engine. Telemetry, error reporting, auto-update and other non-essential
traffic are off (the sandbox has no route out anyway). ``IS_SANDBOX=1`` tells it that it
runs as root inside a sandbox, which it otherwise refuses for unattended tool use.

Transcript: the ``--output-format stream-json`` events (captured to
``$HOME/.openforge/claude-stream.jsonl``) and the session files under
``$HOME/.claude/projects``. Task tools go to ``CLAUDE.md``, the file it reads as project
instructions.
"""

from __future__ import annotations

import os
import shutil
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
    NpmPinned,
    TaskTool,
    Var,
    env_script,
    parse_jsonl,
    read_with_sessions,
    tools_markdown,
    wrapped_launch,
)
from openforge.harnesses.portable import Recipe, loader_script
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.model import McpServer
from openforge.tasks.transcript import ToolUse, Transcript, Turn

__all__ = ["DEFAULT_TOOLS", "ClaudeCodeHarness"]

VERSION = "2.1.197"
PACKAGE = "@anthropic-ai/claude-code"
DEFAULT_TOOLS = ("Bash", "Read", "Write", "Edit", "Glob", "Grep")
_ENV_FILE = f"{ENV_DIR}/claude-env.sh"
_STREAM = f"{ENV_DIR}/claude-stream.jsonl"
_QUIET = {
    "IS_SANDBOX": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
}


class ClaudeCodeHarness(NpmPinned):
    """``claude -p INSTRUCTION --output-format stream-json --verbose`` in the workdir."""

    name = "claude-code"
    version = VERSION
    package = PACKAGE
    version_env = _QUIET
    dialect: Dialect = "anthropic"

    def __init__(
        self,
        home: str = SANDBOX_HOME,
        allowed_tools: Sequence[str] | str = DEFAULT_TOOLS,
        max_turns: int = 30,
        binary: str = "claude",
    ) -> None:
        self.home = home.rstrip("/")
        if isinstance(allowed_tools, str):
            allowed_tools = [t for t in allowed_tools.split(",") if t]
        self.allowed_tools = list(allowed_tools)
        self.max_turns = int(max_turns)
        self.binary = binary

    @property
    def skills_home(self) -> str:
        """Claude Code's user skills (``~/.claude/skills``), where Harbor puts a task's."""
        return f"{self.home}/.claude/skills"

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Write the env file with the rollout's URL, key and model names."""
        env = {
            **_QUIET,
            "ANTHROPIC_BASE_URL": base_url.rstrip("/"),
            "ANTHROPIC_API_KEY": key,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "OPENFORGE_MODEL": model,
            # Print mode starts the first turn while MCP servers still connect, so a task's
            # tools could be missing from it (seen on a loaded machine): wait for them.
            "MCP_CONNECTION_NONBLOCKING": "0",
            "MCP_TIMEOUT": "60000",
        }
        await sandbox.put({f"{self.home}/{_ENV_FILE}": env_script(env)})

    def command(self, instruction: str) -> Launch:
        """Print mode, stream-JSON events, the allowed tools and turn limit, the model."""
        return self.turn_command(instruction, None, resume=False)

    def turn_command(self, message: str, max_turns: int | None, resume: bool) -> Launch:
        """:meth:`command` on ``message``; ``resume`` continues the workdir's last session
        (``--continue``, a multi-turn task's next user message). Claude Code's
        ``--max-turns`` counts the turns of one invocation: a task's ``max_turns`` caps each
        turn of a conversation, not their sum."""
        turns = self.max_turns if max_turns is None else max_turns
        argv: list[str | Var] = [
            self.binary, "-p", message,
            "--output-format", "stream-json", "--verbose",
            "--max-turns", str(turns),
            "--model", Var("OPENFORGE_MODEL"),
        ]  # fmt: skip
        if resume:
            argv.append("--continue")
        if self.allowed_tools:
            argv += ["--allowedTools", ",".join(self.allowed_tools)]
        # The model name lives in the env file: one adapter serves every rollout.
        return wrapped_launch(self.home, _ENV_FILE, argv, capture=_STREAM)

    def portable(self) -> Recipe:
        """Its one executable (a Bun single-file build, which ``patchelf`` would break),
        started on the bundled loader."""
        exe = os.path.realpath(shutil.which(self.binary) or self.binary)
        return Recipe(
            self.name, VERSION, loaded={"libexec/claude": exe},
            scripts={"bin/claude": loader_script("libexec/claude")},
        )  # fmt: skip

    async def add_mcp_server(self, sandbox: Sandbox, server: McpServer) -> None:
        """The task's MCP server in user scope (``~/.claude.json``), its tools allowed.

        User-scope servers start without the trust prompt a project ``.mcp.json`` needs;
        print mode runs only allowed tools, so ``mcp__<server>`` joins the allow list.
        """
        command, *args = server.command
        config = {"mcpServers": {server.name: {"type": "stdio", "command": command, "args": args}}}
        settings = {"permissions": {"allow": [f"mcp__{server.name}"]}}
        await sandbox.put(
            {
                f"{self.home}/.claude.json": orjson.dumps(config),
                f"{self.home}/.claude/settings.json": orjson.dumps(settings),
            }
        )

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """The stream-JSON events and the session files, or None if neither exists."""
        got = await read_with_sessions(
            sandbox, f"{self.home}/{_STREAM}", f"{self.home}/.claude/projects"
        )
        if got is None:
            return None
        events = parse_jsonl(got[0])
        result = next(
            (e for e in reversed(events) if isinstance(e, dict) and e.get("type") == "result"), None
        )
        return self.decode({"events": events, "result": result, "sessions": got[1]})

    @staticmethod
    def decode(raw: Any) -> Transcript:
        """The main session's Anthropic content blocks as turns, the error of the final
        ``result`` event, and every session file as written."""
        sessions = sessions_of(raw)
        result = raw.get("result") if isinstance(raw, dict) else None
        turns = _session_turns(main_session(sessions))
        return Transcript(
            "claude-code", turns, error=_result_error(result), sessions=sessions, raw=raw
        )

    async def add_tools(self, sandbox: Sandbox, tools: Sequence[TaskTool]) -> None:
        """Describe task tools in ``CLAUDE.md``, Claude Code's project instructions."""
        await sandbox.put({"CLAUDE.md": tools_markdown(tools).encode()})


def _result_error(result: Any) -> str | None:
    """The error text of the final ``result`` event (e.g. "Prompt is too long …")."""
    if not isinstance(result, dict) or not result.get("is_error"):
        return None
    why = result.get("terminal_reason") or result.get("subtype")
    status = result.get("api_error_status")
    head = ", ".join(str(x) for x in (why, status and f"HTTP {status}") if x)
    return f"{head}: {trimmed(result.get('result', ''))}" if head else None


def _session_turns(events: Sequence[Any]) -> tuple[Turn, ...]:
    """Claude Code session events (``type`` user/assistant with Anthropic content blocks)."""
    out: list[Turn] = []
    names: dict[str, str] = {}
    for e in events:
        msg = (
            e.get("message")
            if isinstance(e, dict) and e.get("type") in ("user", "assistant")
            else None
        )
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        blocks = (
            content if isinstance(content, list) else [{"type": "text", "text": text_of(content)}]
        )
        if msg.get("role") == "assistant":
            uses = []
            for b in blocks:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    use = ToolUse(
                        str(b.get("id", "")), str(b.get("name", "")), arguments_of(b.get("input"))
                    )
                    names[use.id] = use.name
                    uses.append(use)
            text = "\n".join(
                b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
            )
            out.append(Turn("assistant", text, tuple(uses)))
            continue
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                cid = str(b.get("tool_use_id", ""))
                out.append(
                    Turn(
                        "tool",
                        text_of(b.get("content")),
                        tool_use_id=cid,
                        tool_name=names.get(cid, ""),
                        is_error=bool(b.get("is_error")),
                    )
                )
            elif isinstance(b, dict) and b.get("type") == "text":
                out.append(Turn("user", str(b.get("text", ""))))
    return tuple(out)
