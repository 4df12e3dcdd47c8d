"""The ``mini-swe-agent`` harness: SWE-agent's minimal agent (PyPI ``mini-swe-agent``), as ``mini``.

Installed by ``scripts/install-harnesses.sh`` into its own venv at
``/opt/openforge/mini-swe-agent``, built on the system Python (the sandbox sees ``/usr``
and ``/opt``, not a pyenv under ``/root``). Configured the way its users configure it:
a config YAML merged after its built-in ``mini.yaml`` names the model
``openai/<model>`` (LiteLLM's OpenAI provider) with ``api_base`` at the rollout's
``…/r/<key>/v1`` and the rollout key as ``api_key``, and its documented environment
variables skip the first-run setup wizard and LiteLLM's cost-map download.

Run non-interactively: ``mini --yolo --exit-immediately --cost-limit 0`` (no confirmation,
no "new task?" prompt at the end, no cost limit: a served model has no price). With the
default ``mini.yaml`` it speaks OpenAI Chat Completions with one ``bash`` function tool;
``config="mini_textbased"`` selects its text mode (a fenced ``mswea_bash_command`` block
in the reply, no tools). The transcript is its trajectory file (``--output``). Task tools
are appended to the task text, since mini-swe-agent reads no project instructions file.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import yaml

from openforge.harnesses.base import Dialect, HarnessError, Launch
from openforge.harnesses.decoding import chat_turns, trimmed
from openforge.harnesses.launching import (
    ENV_DIR,
    TaskTool,
    check_version,
    env_script,
    read_json,
)
from openforge.harnesses.launching import tools_markdown as _tools_markdown
from openforge.harnesses.portable import HARNESS_DIR, Recipe
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.transcript import Transcript

__all__ = ["MiniSweAgentHarness", "mini_config"]

VERSION = "2.4.6"
PREFIX = "/opt/openforge/mini-swe-agent"
MINI_BIN = f"{PREFIX}/bin/mini"
# ``mini`` is found on the launch's PATH: this venv's, or the portable one's in a container.
_PATH = (f"{PREFIX}/bin",)
# The version probe runs the Python beside wherever ``mini`` resolves to.
_PROBE = 'm=$(readlink -f "$(command -v "$0")") || exit 127; exec "${m%/*}/python" -c "$1"'
_SYS_PYTHON = "/usr/bin/python3.11"  # the venv's base (install-harnesses.sh)
# Its LLM client stack, pinned with it: the fingerprint holds the openai SDK's headers.
PINS = (f"mini-swe-agent=={VERSION}", "litellm==1.110.2", "openai==3.57.0")
_CONFIGS = {"mini": "litellm", "mini_textbased": "litellm_textbased"}
_ENV_FILE = f"{ENV_DIR}/mini-swe-agent-env.sh"
_CONFIG_FILE = f"{ENV_DIR}/mini-swe-agent.yaml"
_TOOLS_FILE = f"{ENV_DIR}/mini-swe-agent-task-tools.md"
_TRAJECTORY = f"{ENV_DIR}/mini-swe-agent.traj.json"
_VERSION_PROBE = "from importlib.metadata import version; print(version('mini-swe-agent'))"


def mini_config(
    base_url: str,
    key: str,
    model: str,
    model_class: str,
    step_limit: int,
    sampling: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The config merged over the built-in one: the model at the gateway, a step limit, and
    ``sampling`` (``max_tokens``, ``temperature``) in ``model_kwargs``, where mini's users
    set them (LiteLLM passes them through)."""
    return {
        "agent": {"step_limit": step_limit},
        "model": {
            "model_class": model_class,
            "model_name": f"openai/{model}",
            # A served model has no price in LiteLLM's table; mini would stop on the error.
            "cost_tracking": "ignore_errors",
            "model_kwargs": {
                "api_base": base_url.rstrip("/") + "/v1",
                "api_key": key,
                **(sampling or {}),
            },
        },
    }


class MiniSweAgentHarness:
    """``mini -y --exit-immediately -l 0 -c mini.yaml -c OURS -t TASK -o TRAJECTORY``."""

    name = "mini-swe-agent"
    version = VERSION
    dialect: Dialect = "openai_chat"

    def __init__(
        self,
        home: str = SANDBOX_HOME,
        config: str = "mini",
        step_limit: int = 30,
        binary: str = "mini",
        max_tokens: int | str | None = None,  # a string from the CLI's -O KEY=VALUE
        temperature: float | str | None = None,
    ) -> None:
        if config not in _CONFIGS:
            raise HarnessError(
                f"mini-swe-agent config must be one of {sorted(_CONFIGS)}, got {config!r}"
            )
        self.home = home.rstrip("/")
        self.config = config
        self.step_limit = int(step_limit)
        self.binary = binary
        # Sampling as a mini user would set it in model_kwargs (unset: the server's default).
        self.sampling: dict[str, float] = {}
        if max_tokens is not None:
            self.sampling["max_tokens"] = int(max_tokens)
        if temperature is not None:
            self.sampling["temperature"] = float(temperature)

    def install_command(self) -> str:
        """A venv on the system Python under /opt/openforge with the pinned package."""
        return f"/usr/bin/python3 -m venv {PREFIX} && {PREFIX}/bin/pip install {' '.join(PINS)}"

    async def check(self, sandbox: Sandbox) -> None:
        """:class:`HarnessNotInstalled` unless the venv holds the pinned version."""
        await check_version(
            sandbox, self.name, ["/bin/sh", "-c", _PROBE, self.binary, _VERSION_PROBE],
            VERSION, self.install_command(), path=_PATH,
        )  # fmt: skip

    async def configure(self, sandbox: Sandbox, base_url: str, key: str, model: str) -> None:
        """Write the config YAML (model, gateway URL, key) and the env file."""
        config = mini_config(
            base_url, key, model, _CONFIGS[self.config], self.step_limit, self.sampling
        )
        env = {
            "MSWEA_CONFIGURED": "true",  # no first-run setup wizard
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{self.home}/.config/mini-swe-agent",
            # The gateway answers or fails fast: one retry, not ten with back-off up to 60 s.
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2",
            # LiteLLM would fetch its model cost map from the internet at import.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        await sandbox.put(
            {
                f"{self.home}/{_CONFIG_FILE}": yaml.safe_dump(config, sort_keys=False).encode(),
                f"{self.home}/{_ENV_FILE}": env_script(env, _PATH),
            }
        )

    def command(self, instruction: str) -> Launch:
        """``mini`` in yolo mode on the instruction (plus the task tools, if any)."""
        argv = [
            self.binary, "--yolo", "--exit-immediately", "--cost-limit", "0",
            "-c", f"{self.config}.yaml", "-c", f"{self.home}/{_CONFIG_FILE}",
            "-o", f"{self.home}/{_TRAJECTORY}",
        ]  # fmt: skip
        tools = shlex.quote(f"{self.home}/{_TOOLS_FILE}")
        script = (
            f'. "{self.home}/{_ENV_FILE}" || exit 97\n'
            'task="$OPENFORGE_INSTRUCTION"\n'
            f'if [ -f {tools} ]; then task="$task\n\n$(cat {tools})"; fi\n'
            f'exec {" ".join(shlex.quote(a) for a in argv)} -t "$task" </dev/null\n'
        )
        return Launch(argv=["/bin/sh", "-c", script], env={"OPENFORGE_INSTRUCTION": instruction})

    def portable(self) -> Recipe:
        """The venv rebuilt around a copy of its base Python (retargeted at the bundled
        libraries, with the standard library beside it): ``mswea/`` is the venv."""
        venv_python = f"{HARNESS_DIR}/mswea/bin/python3"
        with open(MINI_BIN, encoding="utf-8") as f:
            entry = f.read().split("\n", 1)[1]  # the console script after its shebang
        cfg = (
            f"home = {HARNESS_DIR}/python/bin\ninclude-system-site-packages = false\n"
            f"version = 3.11\nexecutable = {HARNESS_DIR}/python/bin/python3.11\n"
        )
        return Recipe(
            self.name, VERSION,
            trees={"python/lib/python3.11": "/usr/lib/python3.11", "mswea/lib": f"{PREFIX}/lib"},
            patched={"python/bin/python3.11": _SYS_PYTHON},
            scripts={"mswea/bin/mini": f"#!{venv_python}\n{entry}"},
            texts={"mswea/pyvenv.cfg": cfg},
            links={
                "mswea/bin/python3": "../../python/bin/python3.11",
                "mswea/bin/python": "python3",
                "bin/mini": "../mswea/bin/mini",
            },
        )  # fmt: skip

    async def collect(self, sandbox: Sandbox) -> Transcript | None:
        """The trajectory file (``info``, ``messages``), or None if it wrote none."""
        raw = await read_json(sandbox, f"{self.home}/{_TRAJECTORY}", "trajectory")
        return None if raw is None else self.decode(raw)

    @staticmethod
    def decode(raw: Any) -> Transcript:
        """Its OpenAI Chat messages as turns; the exception it stopped on, if any."""
        messages = raw.get("messages") if isinstance(raw, dict) else None
        return Transcript("mini-swe-agent", chat_turns(messages), error=_exit_error(raw), raw=raw)

    async def add_tools(self, sandbox: Sandbox, tools: Sequence[TaskTool]) -> None:
        """Task tools, appended to the task text at launch (mini reads no AGENTS.md)."""
        await sandbox.put({f"{self.home}/{_TOOLS_FILE}": _tools_markdown(tools).encode()})


def _exit_error(raw: Any) -> str | None:
    """The exception the agent stopped on (e.g. LiteLLM's ContextWindowExceededError)."""
    raw = raw if isinstance(raw, dict) else {}
    info = raw.get("info") or {}
    messages = raw.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if last.get("role") == "exit" and info.get("exit_status") not in (None, "", "Submitted"):
        text = str(last.get("content") or "")
        return trimmed(f"{info['exit_status']}: {text}") if text else str(info["exit_status"])
    return None
