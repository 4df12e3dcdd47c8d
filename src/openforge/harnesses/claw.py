"""The ``claw`` harness: OpenForge's own ReAct agent (:mod:`openforge.guest.claw_agent`).

The agent is one standard-library program, shipped as a zipapp (:func:`openforge.guest.bundle`);
``configure`` copies it into the sandbox at ``$HOME/.openforge/claw_agent.pyz`` together with
an env file holding the rollout's URL and key, and the launch runs it with the sandbox's own
``python3 -I``. Nothing is installed.
It speaks OpenAI Chat Completions (non-streaming) and writes its transcript to
``$HOME/.claw/transcript.json``. Task tools go to ``AGENTS.md``, which the agent appends
to its system prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openforge.guest import bundle, claw_agent
from openforge.harnesses.base import Dialect, HarnessError, HarnessNotInstalled, Launch
from openforge.harnesses.decoding import chat_turns, transcribed_error
from openforge.harnesses.launching import (
    ENV_DIR,
    TaskTool,
    env_script,
    read_json,
    tools_markdown,
)
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.model import McpServer
from openforge.tasks.transcript import Transcript

__all__ = ["ClawHarness"]

_ENV_FILE = f"{ENV_DIR}/claw-env.sh"
_AGENT_FILE = f"{ENV_DIR}/claw_agent.pyz"
_TRANSCRIPT = ".claw/transcript.json"
_TOOLS_FILE = f"{ENV_DIR}/claw-tools.json"


class ClawHarness:
    """Runs the built-in ReAct agent with the sandbox's ``python3``."""

    name = "claw"
    version = claw_agent.VERSION
    dialect: Dialect = "openai_chat"

    def __init__(
        self,
        home: str = SANDBOX_HOME,
        max_turns: int = 8,
        max_tokens: int = 256,
        temperature: float = 1.0,
        python: str = "python3",
        script: str | Path | None = None,
    ) -> None:
        self.home = home.rstrip("/")
        self.max_turns = int(max_turns)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.python = python
        # A variant of the agent's source (tests, experiments), bundled in place of
        # guest/claw_agent.py.
        self.script = Path(script) if script is not None else None

    def install_command(self) -> str:
        """Nothing to install beyond Python 3.8+: the adapter copies the agent in."""
        return "apt-get install -y python3"

    async def check(self, sandbox: Sandbox) -> None:
        """The sandbox needs a Python 3.8 or newer."""
        probe = "import sys; print(sys.version_info >= (3, 8))"
        res = await sandbox.exec([self.python, "-c", probe], timeout=60)
        if res.exit_code != 0 or res.stdout.strip() != b"True":
            raise HarnessNotInstalled(
                f"claw needs {self.python} (3.8+) in the sandbox; install it with: "
                f"{self.install_command()}"
            )

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Copy the agent in and write its env file."""
        env = {
            "OPENAI_BASE_URL": base_url.rstrip("/") + "/v1",
            "OPENAI_API_KEY": key,
            "OPENFORGE_MODEL": model,
        }
        await sandbox.put(
            {
                f"{self.home}/{_AGENT_FILE}": bundle(
                    "claw_agent", self.script.read_bytes() if self.script else None
                ),
                f"{self.home}/{_ENV_FILE}": env_script(env),
            }
        )

    def command(self, instruction: str) -> Launch:
        """Source the env file and run the agent on ``instruction``."""
        return self.turn_command(instruction, None, resume=False)

    def turn_command(self, message: str, max_turns: int | None, resume: bool) -> Launch:
        """The agent on ``message``: a new conversation, or (``resume``) its transcript's
        continued; ``max_turns`` (else the adapter's own) caps the conversation's calls."""
        turns = self.max_turns if max_turns is None else max_turns
        script = (
            f'. "{self.home}/{_ENV_FILE}" || exit 97\n'
            f'exec {self.python} -I "{self.home}/{_AGENT_FILE}" "$OPENFORGE_INSTRUCTION" '
            f"--max-turns {turns} --max-tokens {self.max_tokens} "
            f"--temperature {self.temperature} "
            f'--transcript "{self.home}/{_TRANSCRIPT}" --tools "{self.home}/{_TOOLS_FILE}"'
            + (" --resume" if resume else "")
            + "\n"
        )
        return Launch(argv=["/bin/sh", "-c", script], env={"OPENFORGE_INSTRUCTION": message})

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """The agent's transcript (outcome, error, messages), or None if it wrote none."""
        raw = await read_json(sandbox, f"{self.home}/{_TRANSCRIPT}", "transcript")
        return None if raw is None else self.decode(raw)

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
