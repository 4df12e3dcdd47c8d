"""The harness adapter interface: run an unmodified agent harness inside a sandbox.

An adapter configures a harness only the way its users do — a base URL, a key, a model
name, its own config file — and never patches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from openforge.conversation import Completion
from openforge.sandboxes.base import Sandbox
from openforge.tasks.model import McpServer, TaskTool
from openforge.tasks.transcript import Transcript

__all__ = [
    "ConfinedToGui",
    "ExposesTaskTools",
    "Harness",
    "HarnessError",
    "HarnessNotInstalled",
    "Launch",
    "StatesAnswer",
    "TakesMcpServers",
    "TakesSkills",
    "TakesTurnLimit",
]

Dialect = Literal["openai_chat", "openai_responses", "anthropic"]


class HarnessError(Exception):
    """A harness could not be set up."""


class HarnessNotInstalled(HarnessError):
    """Missing or of the wrong version; the message says how to install the pinned one."""


@dataclass(slots=True)
class Launch:
    """How to start the harness for one instruction."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    stdin: bytes | None = None


@runtime_checkable
class Harness(Protocol):
    name: str
    version: str  # the pinned version
    dialect: Dialect

    def install_command(self) -> str:
        """The shell command that installs the pinned version."""
        ...

    async def check(self, sandbox: Sandbox) -> None:
        """Raise :class:`HarnessNotInstalled` if absent or of another version."""
        ...

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Point the harness at ``base_url`` (the rollout's gateway root, ``…/r/<key>``).

        Writes the harness's own config files inside the sandbox.
        """
        ...

    def command(self, instruction: str) -> Launch:
        """The non-interactive invocation for ``instruction``."""
        ...

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """The harness's own transcript read from ``sandbox`` and decoded (:meth:`decode`),
        or None if it wrote none."""
        ...

    def decode(self, raw: Any) -> Transcript:
        """What :meth:`collect` read (kept as ``raw``), decoded: turns, the harness's own
        error when it stopped on one (the API error it got), its session files. Pure."""
        ...


@runtime_checkable
class ExposesTaskTools(Protocol):
    """Optional: an adapter that can tell its harness about a task's tools.

    For harnesses that take no custom tools: it writes the file the harness reads as
    instructions (``AGENTS.md``, ``CLAUDE.md``, a ``SKILL.md``) before the launch.
    """

    async def add_tools(self, sandbox: Sandbox, tools: Sequence[TaskTool]) -> None:
        """Make ``tools`` known to the harness in ``sandbox``."""
        ...


@runtime_checkable
class TakesMcpServers(Protocol):
    """Optional: an adapter whose harness can use a task's MCP server (its tools)."""

    async def add_mcp_server(self, sandbox: Sandbox, server: McpServer) -> None:
        """Configure the harness in ``sandbox`` to use ``server``'s tools."""
        ...


@runtime_checkable
class TakesSkills(Protocol):
    """Optional: an adapter whose harness loads skills (``<name>/SKILL.md`` directories) from
    a directory of its own; a task's skills are copied there before it starts, as Harbor
    copies a task's ``skills_dir`` (e.g. to ``~/.claude/skills`` for Claude Code)."""

    @property
    def skills_home(self) -> str:
        """The absolute sandbox path the harness reads its skills from."""
        ...


@runtime_checkable
class TakesTurnLimit(Protocol):
    """Optional: an adapter whose harness takes a cap on its model calls and can continue
    its last session with a new user message (what a multi-turn task's simulated user says).
    """

    def turn_command(self, message: str, max_turns: int | None, resume: bool) -> Launch:
        """The launch for one agent turn on ``message``: a fresh session, or (``resume``)
        the last one continued; at most ``max_turns`` model calls over the whole session."""
        ...


@runtime_checkable
class ConfinedToGui(Protocol):
    """Optional: an adapter whose model acts only through a GUI environment's actions — no
    shell, no command, no file of the sandbox but its own scratch files (``gui_only`` is
    True). Every other harness is taken to reach the sandbox's files, so it is refused on
    tasks whose reward evidence lives there (``rollouts/reach.py``)."""

    gui_only: bool


@runtime_checkable
class StatesAnswer(Protocol):
    """Optional: an adapter whose harness ends by stating a final answer in its model's own
    reply (the browser agent's ``Answer`` action, Browser-Use's ``done`` text), which a
    benchmark grades beside what the agent did. The orchestrator reads it from the gateway's
    record of the policy's last answered call (``rollouts/recorded.py``), never from a file
    in the sandbox, which the agent could write."""

    def stated_answer(self, reply: Completion) -> str | None:
        """The final answer ``reply`` (the model's answer exactly as generated and recorded)
        states, parsed as the harness parses it; None when it states none. Pure."""
        ...
