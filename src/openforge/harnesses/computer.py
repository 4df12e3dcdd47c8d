"""The ``computer-agent`` harness: OpenForge's own computer-use agent.

Its program is :mod:`openforge.guest.computer_agent`.

A single-script agent (:mod:`.script_agent`), like ``browser-agent``: its zipapp is copied
into the sandbox at ``$HOME/.openforge/computer_agent.pyz`` with an env file holding the
rollout's URL and key, and runs with the sandbox's ``python3 -I``. It works on the desktop
environment the task declares (the orchestrator starts it and exports
``$OPENFORGE_DESKTOP_URL``) with three tools, ``computer`` (PyAutoGUI code), ``bash`` and
``str_replace_editor``, and writes its transcript to ``$HOME/.computer-agent/run.json``.
"""

from __future__ import annotations

from openforge.guest import computer_agent
from openforge.harnesses.base import HarnessError
from openforge.harnesses.script_agent import ScriptAgent
from openforge.sandboxes.runtime import SANDBOX_HOME

__all__ = ["ComputerAgentHarness"]


class ComputerAgentHarness(ScriptAgent):
    """Runs the built-in computer-use agent with the sandbox's ``python3``."""

    name = "computer-agent"
    version = computer_agent.VERSION
    program = "computer_agent"

    def __init__(
        self,
        home: str = SANDBOX_HOME,
        max_steps: int = 15,
        max_tokens: int = 256,
        temperature: float = 1.0,
        keep_screenshots: int = 3,
        python: str = "python3",
    ) -> None:
        if int(keep_screenshots) < 1:
            raise HarnessError("computer-agent: keep_screenshots must be at least 1")
        self.keep_screenshots = int(keep_screenshots)
        super().__init__(home, max_steps, max_tokens, temperature, python)

    def agent_args(self) -> str:
        """How many recent screenshots stay in the agent's prompt."""
        return f"--keep-screenshots {self.keep_screenshots} "
