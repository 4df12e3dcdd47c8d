"""The ``shell`` harness: any shell command as the agent (tests, bring-your-own harnesses).

``configure`` writes the harness's config file, ``$HOME/.openforge/shell-env.sh``, which the
launch sources before running the command. The command sees:

- ``OPENFORGE_BASE_URL``: the rollout's gateway root (``…/r/<key>``)
- ``OPENAI_BASE_URL`` (``…/r/<key>/v1``) and ``OPENAI_API_KEY``
- ``ANTHROPIC_BASE_URL`` (``…/r/<key>``) and ``ANTHROPIC_API_KEY``
- ``OPENFORGE_MODEL``: the model name to ask for
- ``OPENFORGE_INSTRUCTION``: the task's instruction
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from openforge.harnesses.base import HarnessError, Launch
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.transcript import Transcript

__all__ = ["ShellHarness", "harness_env"]

_ENV_FILE_REL = ".openforge/shell-env.sh"


def harness_env(base_url: str, key: str, model: str) -> dict[str, str]:
    """The environment every OpenAI- or Anthropic-speaking client reads for ``base_url``."""
    root = base_url.rstrip("/")
    return {
        "OPENFORGE_BASE_URL": root,
        "OPENAI_BASE_URL": f"{root}/v1",
        "OPENAI_API_KEY": key,
        "ANTHROPIC_BASE_URL": root,
        "ANTHROPIC_API_KEY": key,
        "OPENFORGE_MODEL": model,
    }


class ShellHarness:
    """Runs ``command`` with ``sh -c`` in the sandbox's workdir."""

    name = "shell"
    version = "1"
    dialect: Literal["openai_chat"] = "openai_chat"

    def __init__(self, command: str, home: str = SANDBOX_HOME) -> None:
        if not command.strip():
            raise HarnessError("the shell harness needs a command (--harness-option command=…)")
        self.shell_command = command
        self.home = home.rstrip("/")

    def install_command(self) -> str:
        """Nothing to install: ``/bin/sh`` is part of every sandbox."""
        return "true"

    async def check(self, sandbox: Sandbox) -> None:
        """Nothing to check: a missing ``/bin/sh`` shows up as the launch failing."""

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Write the env file the launch sources."""
        env = harness_env(base_url, key, model)
        lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        await sandbox.put({f"{self.home}/{_ENV_FILE_REL}": ("\n".join(lines) + "\n").encode()})

    def command(self, instruction: str) -> Launch:
        """``sh -c`` the user's command after sourcing the env file."""
        script = f'. "{self.home}/{_ENV_FILE_REL}"\n{self.shell_command}'
        return Launch(argv=["/bin/sh", "-c", script], env={"OPENFORGE_INSTRUCTION": instruction})

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """A shell command keeps no transcript."""
        return None

    @staticmethod
    def decode(raw: Any) -> Transcript:
        """Nothing to decode: a shell command's transcript is only what it was given."""
        return Transcript("shell", raw=raw)
