"""OpenForge's built-in agents that are one guest program each (``claw``, ``browser-agent``,
``computer-agent``).

``configure`` copies the program's zipapp (:func:`openforge.guest.bundle`) into the sandbox at
``$HOME/.openforge/<program>.pyz`` with an env file holding the rollout's URL and key; the
launch sources the env file and runs it with the sandbox's ``python3 -I``; the program writes
its transcript to ``$HOME/.<name>/run.json`` (or the subclass's ``transcript_file``). A
subclass names its program and adds its own arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from openforge.guest import bundle
from openforge.harnesses.base import Dialect, HarnessNotInstalled, Launch
from openforge.harnesses.decoding import transcribed_error
from openforge.harnesses.launching import ENV_DIR, env_script, read_json
from openforge.sandboxes.base import Sandbox
from openforge.tasks.transcript import Transcript

__all__ = ["ScriptAgent", "guest_launch"]


def guest_launch(env_file: str, python: str, program: str, args: str, instruction: str) -> Launch:
    """Source ``env_file``, then run the guest ``program`` (a zipapp) isolated on
    ``$OPENFORGE_INSTRUCTION`` with ``args`` (shell words)."""
    script = (
        f'. "{env_file}" || exit 97\nexec {python} -I "{program}" "$OPENFORGE_INSTRUCTION" {args}\n'
    )
    return Launch(argv=["/bin/sh", "-c", script], env={"OPENFORGE_INSTRUCTION": instruction})


class ScriptAgent:
    """The adapter of a built-in guest-program agent; subclasses set :attr:`name`,
    :attr:`version` and :attr:`program`, and may add launch arguments in :meth:`agent_args`."""

    name: ClassVar[str]
    version: ClassVar[str]
    program: ClassVar[str]  # its name in openforge.guest.PROGRAMS
    # Where it writes its transcript, under $HOME; empty: ``.<name>/run.json``.
    transcript_file: ClassVar[str] = ""
    dialect: Dialect = "openai_chat"

    def __init__(
        self,
        home: str,
        max_steps: int,
        max_tokens: int,
        temperature: float,
        python: str,
        script: str | Path | None = None,
    ) -> None:
        self.home = home.rstrip("/")
        self.max_steps = int(max_steps)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.python = python
        # A variant of the program's source (tests, experiments), bundled in its place.
        self.script = Path(script) if script is not None else None

    @property
    def _env_file(self) -> str:
        return f"{self.home}/{ENV_DIR}/{self.name}-env.sh"

    @property
    def _agent_file(self) -> str:
        return f"{self.home}/{ENV_DIR}/{self.program}.pyz"

    @property
    def _transcript(self) -> str:
        return f"{self.home}/{self.transcript_file or f'.{self.name}/run.json'}"

    def agent_args(self) -> str:
        """The subclass's own command-line arguments (shell words, trailing space)."""
        return ""

    def install_command(self) -> str:
        """Nothing to install beyond Python 3.8+: the adapter copies the program in."""
        return "apt-get install -y python3"

    async def check(self, sandbox: Sandbox) -> None:
        """The sandbox needs a Python 3.8 or newer."""
        probe = "import sys; print(sys.version_info >= (3, 8))"
        res = await sandbox.exec([self.python, "-c", probe], timeout=60)
        if res.exit_code != 0 or res.stdout.strip() != b"True":
            raise HarnessNotInstalled(
                f"{self.name} needs {self.python} (3.8+) in the sandbox; install it with: "
                f"{self.install_command()}"
            )

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Copy the agent in and write its env file."""
        env = {
            "OPENAI_BASE_URL": base_url.rstrip("/") + "/v1",
            "OPENAI_API_KEY": key,
            "OPENFORGE_MODEL": model,
        }
        program = bundle(self.program, self.script.read_bytes() if self.script else None)
        await sandbox.put({self._agent_file: program, self._env_file: env_script(env)})

    def command(self, instruction: str) -> Launch:
        """Source the env file and run the agent on ``instruction``."""
        args = (
            f"{self.agent_args()}--max-steps {self.max_steps} --max-tokens {self.max_tokens} "
            f'--temperature {self.temperature} --transcript "{self._transcript}"'
        )
        return guest_launch(self._env_file, self.python, self._agent_file, args, instruction)

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """The agent's transcript (outcome, error, steps), or None if it wrote none."""
        raw = await read_json(sandbox, self._transcript, "transcript")
        return None if raw is None else self.decode(raw)

    @classmethod
    def decode(cls, raw: Any) -> Transcript:
        """No chat turns (its ``steps`` are GUI actions, kept in ``raw``); the model API or
        environment error it stopped on, if any."""
        return Transcript(cls.name, error=transcribed_error(raw), raw=raw)
