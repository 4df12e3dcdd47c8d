"""The ``claw`` harness: OpenForge's own ReAct agent (:mod:`openforge.guest.claw_agent`).

A guest-program agent (:mod:`.script_agent`): ``configure`` copies its zipapp into the sandbox
at ``$HOME/.openforge/claw_agent.pyz`` together with an env file holding the rollout's URL and
key, and the launch runs it with the sandbox's own ``python3 -I``. Nothing is installed.
It speaks OpenAI Chat Completions (non-streaming) and writes its transcript to
``$HOME/.claw/transcript.json``. Task tools go to ``AGENTS.md``, which the agent appends
to its system prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openforge.guest import claw_agent
from openforge.harnesses.base import HarnessError, Launch
from openforge.harnesses.decoding import chat_turns, transcribed_error
from openforge.harnesses.launching import ENV_DIR, TaskTool, tools_markdown
from openforge.harnesses.script_agent import ScriptAgent, guest_launch
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.model import McpServer
from openforge.tasks.transcript import Transcript

__all__ = ["ClawHarness"]

_TOOLS_FILE = f"{ENV_DIR}/claw-tools.json"


class ClawHarness(ScriptAgent):
    """Runs the built-in ReAct agent with the sandbox's ``python3``."""

    name = "claw"
    version = claw_agent.VERSION
    program = "claw_agent"
    transcript_file = ".claw/transcript.json"

    def __init__(
        self,
        home: str = SANDBOX_HOME,
        max_turns: int = 8,
        max_tokens: int = 256,
        temperature: float = 1.0,
        python: str = "python3",
        script: str | Path | None = None,
    ) -> None:
        super().__init__(home, max_turns, max_tokens, temperature, python, script)

    @property
    def max_turns(self) -> int:
        """Its cap on the conversation's model calls (what the GUI agents call steps)."""
        return self.max_steps

    def command(self, instruction: str) -> Launch:
        """Source the env file and run the agent on ``instruction``."""
        return self.turn_command(instruction, None, resume=False)

    def turn_command(self, message: str, max_turns: int | None, resume: bool) -> Launch:
        """The agent on ``message``: a new conversation, or (``resume``) its transcript's
        continued; ``max_turns`` (else the adapter's own) caps the conversation's calls."""
        turns = self.max_turns if max_turns is None else max_turns
        args = (
            f"--max-turns {turns} --max-tokens {self.max_tokens} "
            f"--temperature {self.temperature} "
            f'--transcript "{self._transcript}" --tools "{self.home}/{_TOOLS_FILE}"'
            + (" --resume" if resume else "")
        )
        return guest_launch(self._env_file, self.python, self._agent_file, args, message)

    @staticmethod
    def decode(raw: Any) -> Transcript:
        """Its OpenAI Chat messages as turns; the model API error it stopped on, if any."""
        messages = raw.get("messages") if isinstance(raw, dict) else None
        return Transcript("claw", chat_turns(messages), error=transcribed_error(raw), raw=raw)

    async def add_mcp_server(self, sandbox: Sandbox, server: McpServer) -> None:
        """The server's tools as the agent's own, each call going through the bridge."""
        if not server.call:
            # A task's own MCP server (Harbor's) lists its tools only when asked over MCP,
            # which this agent does not speak: refused rather than run without its tools.
            raise HarnessError(
                f"the built-in claw agent cannot use the task's own MCP server {server.name!r} "
                "(use claude-code, codex or openclaw)"
            )
        tools = [
            {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema or {"type": "object", "properties": {}},
                "call": [*server.call, t.name],
            }
            for t in server.tools
        ]
        await sandbox.put({f"{self.home}/{_TOOLS_FILE}": json.dumps(tools).encode()})

    async def add_tools(self, sandbox: Sandbox, tools: Sequence[TaskTool]) -> None:
        """Describe task tools in ``AGENTS.md``; the agent adds it to its system prompt."""
        await sandbox.put({"AGENTS.md": tools_markdown(tools).encode()})
