"""The ``browser-agent`` harness: OpenForge's own web agent (:mod:`openforge.guest.browser_agent`).

A single-script agent (:mod:`.script_agent`): its zipapp is copied into the sandbox at
``$HOME/.openforge/browser_agent.pyz`` with an env file holding the rollout's URL and key,
and runs with the sandbox's ``python3 -I``. It drives the browser environment the task
declares (the orchestrator starts it and exports ``$OPENFORGE_BROWSER_URL``) in ``axtree``
(text-only) or ``som`` (set-of-marks screenshot) mode, and writes its transcript to
``$HOME/.browser-agent/run.json``.
"""

from __future__ import annotations

from openforge.conversation import Completion
from openforge.guest import browser_agent
from openforge.harnesses.base import HarnessError
from openforge.harnesses.script_agent import ScriptAgent
from openforge.sandboxes.runtime import SANDBOX_HOME

__all__ = ["BrowserAgentHarness"]

_MODES = ("axtree", "som")


class BrowserAgentHarness(ScriptAgent):
    """Runs the built-in browser agent with the sandbox's ``python3``."""

    name = "browser-agent"
    version = browser_agent.VERSION
    program = "browser_agent"
    # Its model acts only through the browser environment's actions (ConfinedToGui).
    gui_only = True

    def __init__(
        self,
        mode: str = "axtree",
        home: str = SANDBOX_HOME,
        max_steps: int = 8,
        max_tokens: int = 64,
        temperature: float = 1.0,
        python: str = "python3",
    ) -> None:
        if mode not in _MODES:
            raise HarnessError(f"browser-agent: mode must be one of {', '.join(_MODES)}")
        self.mode = mode
        super().__init__(home, max_steps, max_tokens, temperature, python)

    def agent_args(self) -> str:
        """The observation mode."""
        return f"--mode {self.mode} "

    def stated_answer(self, reply: Completion) -> str | None:
        """The text of the ``Answer`` action ``reply`` asks for, parsed by the agent's own
        parser (what it would have sent the environment); None for any other action
        (:class:`~openforge.harnesses.base.StatesAnswer`)."""
        act = browser_agent.parse_action(reply.text)
        if act is None or act["action"] != "answer":
            return None
        return str(act["text"])
