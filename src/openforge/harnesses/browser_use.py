"""The ``browser-use`` harness: Browser-Use (PyPI ``browser-use``), unmodified.

Installed by ``scripts/install-harnesses.sh`` into its own venv at
``/opt/openforge/browser-use`` on the system Python (the sandbox sees ``/opt``). It is run
the way its users run it, through its Python API (it has no non-interactive CLI for a
task): :mod:`openforge.guest.browser_use_runner` builds an ``Agent`` with Browser-Use's own
``ChatOpenAI`` at the rollout's ``…/r/<key>/v1`` and a ``Browser`` attached over DevTools
to the task's browser environment. It speaks plain Chat Completions with a strict
``json_schema`` response format (its ``AgentOutput``).

Its end-of-task judge call is disabled (``judge="off"``), or sent to a separate judge
endpoint (``judge="separate"`` with ``judge_base_url``/``judge_model``: a gateway route
whose calls are recorded with the ``judge`` role), so it is never recorded as policy data.
"""

from __future__ import annotations

import json
from typing import Any

from openforge.conversation import Completion
from openforge.guest import bundle
from openforge.harnesses.base import Dialect, HarnessError, Launch
from openforge.harnesses.launching import ENV_DIR, check_version, env_script, read_json
from openforge.harnesses.script_agent import guest_launch
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.transcript import Transcript

__all__ = ["BrowserUseHarness"]

VERSION = "0.13.14"
PREFIX = "/opt/openforge/browser-use"
PINS = (f"browser-use=={VERSION}",)
# Bundled, not imported: it imports browser_use, which only the sandbox's venv has.
_RUNNER_FILE = f"{ENV_DIR}/browser_use_runner.pyz"
_ENV_FILE = f"{ENV_DIR}/browser-use-env.sh"
_TRANSCRIPT = ".browser-use-run/history.json"
_VERSION_PROBE = "from importlib.metadata import version; print(version('browser-use'))"


class BrowserUseHarness:
    """Browser-Use's ``Agent`` on the task's browser, through the gateway."""

    name = "browser-use"
    version = VERSION
    dialect: Dialect = "openai_chat"
    # Its model acts only through the browser environment's actions (ConfinedToGui).
    gui_only = True

    def __init__(
        self,
        home: str = SANDBOX_HOME,
        max_steps: int = 8,
        vision: bool = False,
        judge: str = "off",
        judge_base_url: str = "",
        judge_model: str = "judge",
        prefix: str = PREFIX,
    ) -> None:
        if judge not in ("off", "separate"):
            raise HarnessError("browser-use: judge must be 'off' or 'separate'")
        if judge == "separate" and not judge_base_url:
            raise HarnessError("browser-use: judge='separate' needs judge_base_url")
        self.home = home.rstrip("/")
        self.max_steps = int(max_steps)
        self.vision = bool(vision)
        self.judge = judge
        self.judge_base_url = judge_base_url
        self.judge_model = judge_model
        self.python = f"{prefix.rstrip('/')}/bin/python"

    def install_command(self) -> str:
        """A venv on the system Python under /opt/openforge with the pinned package."""
        return f"/usr/bin/python3 -m venv {PREFIX} && {PREFIX}/bin/pip install {' '.join(PINS)}"

    async def check(self, sandbox: Sandbox) -> None:
        """:class:`HarnessNotInstalled` unless the venv holds the pinned version."""
        await check_version(
            sandbox,
            self.name,
            [self.python, "-c", _VERSION_PROBE],
            VERSION,
            self.install_command(),
        )

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Copy the runner in and write its env file (URL, key, model, judge endpoint)."""
        env = {
            "OPENAI_BASE_URL": base_url.rstrip("/") + "/v1",
            "OPENAI_API_KEY": key,
            "OPENFORGE_MODEL": model,
        }
        if self.judge == "separate":
            env |= {
                "OPENFORGE_JUDGE_BASE_URL": self.judge_base_url,
                "OPENFORGE_JUDGE_MODEL": self.judge_model,
            }
        await sandbox.put(
            {
                f"{self.home}/{_RUNNER_FILE}": bundle("browser_use_runner"),
                f"{self.home}/{_ENV_FILE}": env_script(env),
            }
        )

    def command(self, instruction: str) -> Launch:
        """Source the env file and run Browser-Use on ``instruction``."""
        vision = "--vision" if self.vision else "--no-vision"
        args = (
            f"--max-steps {self.max_steps} {vision} --judge {self.judge} "
            f'--transcript "{self.home}/{_TRANSCRIPT}"'
        )
        env, runner = f"{self.home}/{_ENV_FILE}", f"{self.home}/{_RUNNER_FILE}"
        return guest_launch(env, self.python, runner, args, instruction)

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """Browser-Use's own run history, or None if it wrote none."""
        raw = await read_json(sandbox, f"{self.home}/{_TRANSCRIPT}", "history")
        return None if raw is None else self.decode(raw)

    @staticmethod
    def decode(raw: Any) -> Transcript:
        """No chat turns (its history is browser actions, kept in ``raw``); the final
        answer of its ``done`` action."""
        return Transcript("browser-use", answer=_done_text(raw), raw=raw)

    def stated_answer(self, reply: Completion) -> str | None:
        """The ``text`` of the ``done`` action ``reply`` takes
        (:class:`~openforge.harnesses.base.StatesAnswer`).

        ``reply`` is Browser-Use's ``AgentOutput`` as JSON text (its ``ChatOpenAI`` asks for
        that ``json_schema`` and validates the message content, never a tool call), with
        ``action`` a list of ``{name: params}``. Browser-Use runs ``done`` only as the first
        action of a step (``Agent.multi_act`` stops before a later one), so only a first
        ``done`` states an answer.
        """
        try:
            output = json.loads(reply.text)
        except ValueError:
            return None
        actions = output.get("action") if isinstance(output, dict) else None
        first = actions[0] if isinstance(actions, list) and actions else None
        done = first.get("done") if isinstance(first, dict) else None
        text = done.get("text") if isinstance(done, dict) else None
        return text if isinstance(text, str) else None


def _done_text(raw: Any) -> str | None:
    """Browser-Use's final ``done`` text: the last step's result marked ``is_done``."""
    history = raw.get("history") if isinstance(raw, dict) else None
    if not isinstance(history, list) or not history:
        return None
    for res in (history[-1] or {}).get("result") or []:
        if isinstance(res, dict) and res.get("is_done"):
            return str(res.get("extracted_content") or "")
    return None
