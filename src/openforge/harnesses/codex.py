"""The ``codex`` harness: OpenAI's Codex CLI, unmodified, as ``codex exec``.

Configured through its own ``config.toml`` in a per-sandbox ``CODEX_HOME``
(``$HOME/.codex``): a custom model provider ``openforge`` with the rollout's
``…/r/<key>/v1`` as ``base_url``, ``wire_api = "responses"`` (the only wire API current
Codex accepts) and ``env_key`` naming the variable that holds the rollout key.
Approvals are off (``approval_policy = "never"``: nobody is there to approve).

Its own sandbox is ``danger-full-access``: Codex would otherwise wrap every tool command
in its Linux sandbox (bubblewrap/Landlock + seccomp), which needs to create user
namespaces and install filters inside ours — a nested sandbox that the outer one
(capabilities dropped, its own user namespace) refuses, so every command would fail.
Isolation is the OpenForge sandbox's job; inside it Codex may touch everything.

Transcript: ``codex exec --json`` events (captured to ``$HOME/.openforge/codex-events.jsonl``)
and the session files under ``$CODEX_HOME/sessions``. Task tools go to ``AGENTS.md``; a
task's MCP server goes to ``config.toml`` (:func:`mcp_server_table`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

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
    env_script,
    parse_jsonl,
    read_with_sessions,
    tools_markdown,
    wrapped_launch,
)
from openforge.harnesses.portable import HARNESS_DIR, Recipe
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.model import McpServer
from openforge.tasks.transcript import ToolUse, Transcript, Turn

__all__ = ["CodexHarness", "codex_config", "mcp_server_table"]

VERSION = "0.171.0"
PACKAGE = "@openai/codex"
KEY_ENV = "OPENFORGE_API_KEY"
# The npm package's native build (its codex.js only picks this directory and execs it).
_NATIVE = "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl"
_ENV_FILE = f"{ENV_DIR}/codex-env.sh"
_EVENTS = f"{ENV_DIR}/codex-events.jsonl"


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_config(
    base_url: str,
    model: str,
    reasoning_effort: str | None = None,
    auto_compact_tokens: int | None = None,
) -> str:
    """The ``config.toml`` pointing Codex at ``base_url`` (``…/r/<key>``).

    The provider is named ``OpenAI``: Codex 0.171 offers remote compaction
    (``compaction_trigger`` items, which the gateway serves from the policy) only to a
    provider of that name (``ModelProviderInfo::is_openai`` compares it) or Azure's, and
    would otherwise summarise in its own turn and rebuild the history itself. Nothing
    else Codex sends changes with it (its first call is the recorded one, tools and all).
    ``auto_compact_tokens``: Codex's ``model_auto_compact_token_limit``, the context size
    past which it compacts (default: 90% of the model's window).
    """
    lines = [
        f"model = {_toml(model)}",
        'model_provider = "openforge"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
    ]
    if reasoning_effort:
        lines.append(f"model_reasoning_effort = {_toml(reasoning_effort)}")
    if auto_compact_tokens is not None:
        lines.append(f"model_auto_compact_token_limit = {int(auto_compact_tokens)}")
    lines += [
        "",
        "[model_providers.openforge]",
        'name = "OpenAI"',
        f"base_url = {_toml(base_url.rstrip('/') + '/v1')}",
        'wire_api = "responses"',
        f"env_key = {_toml(KEY_ENV)}",
        # The gateway answers or fails fast; a retry storm would only repeat a refused call.
        "request_max_retries = 1",
        "stream_max_retries = 1",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[history]",
        'persistence = "save-all"',
    ]
    return "\n".join(lines) + "\n"


def mcp_server_table(name: str, command: str, args: Sequence[str]) -> str:
    """``[mcp_servers.NAME]``: a stdio server Codex starts beside the session.

    Codex offers its tools to the model as one Responses ``namespace`` tool
    (``mcp__NAME``); the gateway serves them as ``mcp__NAME__<tool>`` and answers a call
    with that namespace, which Codex dispatches to this server. ``approval_policy =
    "never"`` covers MCP calls too. The start-up limit is raised from Codex's 10 s: the
    bridge imports the MCP SDK, which takes seconds on a loaded machine.
    """
    return "\n".join(
        [
            "",
            f"[mcp_servers.{_toml(name)}]",
            f"command = {_toml(command)}",
            f"args = [{', '.join(_toml(a) for a in args)}]",
            "startup_timeout_sec = 60",
            "",
        ]
    )


class CodexHarness(NpmPinned):
    """``codex exec --json --skip-git-repo-check --sandbox danger-full-access INSTRUCTION``."""

    name = "codex"
    version = VERSION
    package = PACKAGE
    dialect: Dialect = "openai_responses"

    def __init__(
        self,
        home: str = SANDBOX_HOME,
        binary: str = "codex",
        reasoning_effort: str | None = None,
        auto_compact_tokens: int | None = None,
    ) -> None:
        """``auto_compact_tokens``: the context size past which Codex compacts (see
        :func:`codex_config`)."""
        self.home = home.rstrip("/")
        self.binary = binary
        self.reasoning_effort = reasoning_effort
        self.auto_compact_tokens = auto_compact_tokens

    @property
    def codex_home(self) -> str:
        """``CODEX_HOME`` inside the sandbox (per sandbox, as HOME is)."""
        return f"{self.home}/.codex"

    @property
    def skills_home(self) -> str:
        """Codex's user skills (``$CODEX_HOME/skills``), where Harbor puts a task's."""
        return f"{self.codex_home}/skills"

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Write ``$CODEX_HOME/config.toml`` and the env file holding the key."""
        env = {"CODEX_HOME": self.codex_home, KEY_ENV: key, "OPENFORGE_MODEL": model}
        await sandbox.put(
            {
                f"{self.codex_home}/config.toml": codex_config(
                    base_url, model, self.reasoning_effort, self.auto_compact_tokens
                ).encode(),
                f"{self.home}/{_ENV_FILE}": env_script(env),
            }
        )

    def command(self, instruction: str) -> Launch:
        """``codex exec`` non-interactively in the workdir, JSONL events on stdout."""
        argv = [
            self.binary, "exec", "--json", "--skip-git-repo-check",
            "--sandbox", "danger-full-access", "--color", "never", instruction,
        ]  # fmt: skip
        return wrapped_launch(self.home, _ENV_FILE, argv, capture=_EVENTS)

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """The ``--json`` events and the session files, or None if neither exists."""
        got = await read_with_sessions(
            sandbox, f"{self.home}/{_EVENTS}", f"{self.codex_home}/sessions"
        )
        if got is None:
            return None
        return self.decode({"events": parse_jsonl(got[0]), "sessions": got[1]})

    @staticmethod
    def decode(raw: Any) -> Transcript:
        """The main session's Responses items as turns, the message of the last
        ``turn.failed`` or ``error`` event, and every session file as written."""
        sessions = sessions_of(raw)
        events = raw.get("events") if isinstance(raw, dict) else None
        turns = _session_turns(main_session(sessions))
        return Transcript("codex", turns, error=_event_error(events), sessions=sessions, raw=raw)

    def portable(self) -> Recipe:
        """The npm package's static musl build (``codex``, its ``rg``), run as codex.js
        runs it, with ``CODEX_MANAGED_BY_NPM=1``."""
        package = os.path.dirname(os.path.dirname(os.path.realpath(
            shutil.which(self.binary) or self.binary)))  # fmt: skip
        native = f"{HARNESS_DIR}/libexec/codex/bin/codex"
        entry = f'#!/bin/sh\nCODEX_MANAGED_BY_NPM=1 exec {native} "$@"\n'
        return Recipe(
            self.name, VERSION, trees={"libexec/codex": f"{package}/{_NATIVE}"},
            scripts={"bin/codex": entry},
        )  # fmt: skip

    async def add_mcp_server(self, sandbox: Sandbox, server: McpServer) -> None:
        """The task's MCP server as an ``[mcp_servers.<name>]`` table of ``config.toml``."""
        command, *args = server.command
        got = await sandbox.get([f"{self.codex_home}/config.toml"])
        config = got.get(f"{self.codex_home}/config.toml", b"").decode()
        config += mcp_server_table(server.name, command, args)
        await sandbox.put({f"{self.codex_home}/config.toml": config.encode()})

    async def add_tools(self, sandbox: Sandbox, tools: Sequence[TaskTool]) -> None:
        """Describe task tools in ``AGENTS.md``, which Codex reads as project instructions."""
        await sandbox.put({"AGENTS.md": tools_markdown(tools).encode()})


def _event_error(events: Any) -> str | None:
    """The message of the last ``turn.failed`` or ``error`` event."""
    for event in reversed(events if isinstance(events, list) else []):
        if isinstance(event, dict) and event.get("type") in ("turn.failed", "error"):
            err = event.get("error") if event.get("type") == "turn.failed" else event
            if isinstance(err, dict) and err.get("message"):
                return trimmed(err["message"])
    return None


def _session_turns(events: Sequence[Any]) -> tuple[Turn, ...]:
    """Codex session events (``response_item`` payloads: message, function_call, …_output);
    a function call joins the assistant turn before it."""
    out: list[Turn] = []
    names: dict[str, str] = {}
    for e in events:
        item = (
            e.get("payload") if isinstance(e, dict) and e.get("type") == "response_item" else None
        )
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message" and item.get("role") in ("user", "assistant"):
            out.append(Turn(item["role"], text_of(item.get("content"))))
        elif kind == "function_call":
            use = ToolUse(
                str(item.get("call_id", "")),
                str(item.get("name", "")),
                arguments_of(item.get("arguments")),
            )
            names[use.id] = use.name
            if out and out[-1].role == "assistant":
                out[-1] = replace(out[-1], tool_uses=(*out[-1].tool_uses, use))
            else:
                out.append(Turn("assistant", "", (use,)))
        elif kind == "function_call_output":
            cid = str(item.get("call_id", ""))
            output = item.get("output")
            out.append(
                Turn(
                    "tool",
                    output if isinstance(output, str) else text_of(output),
                    tool_use_id=cid,
                    tool_name=names.get(cid, ""),
                )
            )
    return tuple(out)
