"""The ``computer-agent`` harness: OpenForge's own computer-use agent (:mod:`.computer_agent`).

Like ``browser-agent``: ``configure`` copies the standard-library agent script into the
sandbox at ``$HOME/.openforge/computer_agent.py`` with an env file holding the rollout's URL
and key, and the launch runs it with the sandbox's ``python3``. It works on the desktop
environment the task declares (the orchestrator starts it and exports
``$OPENFORGE_DESKTOP_URL``) with three tools, ``computer`` (PyAutoGUI code), ``bash`` and
``str_replace_editor``, and writes its transcript to ``$HOME/.computer-agent/run.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openforge.harnesses import computer_agent
from openforge.harnesses.base import Dialect, HarnessError, HarnessNotInstalled, Launch
from openforge.harnesses.launching import ENV_DIR, env_script, read_json, transcribed_error
from openforge.sandboxes.base import Sandbox

__all__ = ["ComputerAgentHarness"]

_SCRIPT = Path(computer_agent.__file__)
_ENV_FILE = f"{ENV_DIR}/computer-agent-env.sh"
_AGENT_FILE = f"{ENV_DIR}/computer_agent.py"
_TRANSCRIPT = ".computer-agent/run.json"


class ComputerAgentHarness:
    """Runs the built-in computer-use agent with the sandbox's ``python3``."""

    name = "computer-agent"
    version = computer_agent.VERSION
    dialect: Dialect = "openai_chat"

    def __init__(
        self,
        home: str = "/home/sandbox",
        max_steps: int = 15,
        max_tokens: int = 256,
        temperature: float = 1.0,
        keep_screenshots: int = 3,
        python: str = "python3",
    ) -> None:
        if int(keep_screenshots) < 1:
            raise HarnessError("computer-agent: keep_screenshots must be at least 1")
        self.keep_screenshots = int(keep_screenshots)
        self.home = home.rstrip("/")
        self.max_steps = int(max_steps)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.python = python

    def install_command(self) -> str:
        """Nothing to install beyond Python 3.8+: the adapter copies the script in."""
        return "apt-get install -y python3"

    async def check(self, sandbox: Sandbox) -> None:
        """The sandbox needs a Python 3.8 or newer."""
        probe = "import sys; print(sys.version_info >= (3, 8))"
        res = await sandbox.exec([self.python, "-c", probe], timeout=60)
        if res.exit_code != 0 or res.stdout.strip() != b"True":
            raise HarnessNotInstalled(
                f"computer-agent needs {self.python} (3.8+) in the sandbox; install it with: "
                f"{self.install_command()}"
            )

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Copy the agent script in and write its env file."""
        env = {
            "OPENAI_BASE_URL": base_url.rstrip("/") + "/v1",
            "OPENAI_API_KEY": key,
            "OPENFORGE_MODEL": model,
        }
        await sandbox.put(
            {
                f"{self.home}/{_AGENT_FILE}": _SCRIPT.read_bytes(),
                f"{self.home}/{_ENV_FILE}": env_script(env),
            }
        )

    def command(self, instruction: str) -> Launch:
        """Source the env file and run the agent on ``instruction``."""
        script = (
            f'. "{self.home}/{_ENV_FILE}" || exit 97\n'
            f'exec {self.python} "{self.home}/{_AGENT_FILE}" "$OPENFORGE_INSTRUCTION" '
            f"--keep-screenshots {self.keep_screenshots} "
            f"--max-steps {self.max_steps} --max-tokens {self.max_tokens} "
            f"--temperature {self.temperature} "
            f'--transcript "{self.home}/{_TRANSCRIPT}"\n'
        )
        return Launch(argv=["/bin/sh", "-c", script], env={"OPENFORGE_INSTRUCTION": instruction})

    async def collect(self, sandbox: Sandbox) -> dict[str, Any] | None:
        """The agent's transcript (outcome, error, tool steps), or None if it wrote none."""
        return await read_json(sandbox, f"{self.home}/{_TRANSCRIPT}", "transcript")

    def failure_reason(self, transcript: dict[str, Any] | None, log: bytes) -> str | None:
        """The model API or environment error the agent transcribed, if it stopped on one."""
        return transcribed_error(transcript)
