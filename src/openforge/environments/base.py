"""The interface every GUI environment offers the orchestrator, and what they share.

An environment runs inside the harness's own exec: :meth:`GuiEnvironment.wrap_argv` starts it,
runs the harness, and stops it, so nothing it started outlives the harness (the exec's PID
namespace ends with it, also on a timeout or a cancel).
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Protocol, runtime_checkable

from openforge.sandboxes.base import Sandbox, SandboxError

__all__ = [
    "GUI_PREFIX",
    "GUI_PYTHON",
    "STATED_ANSWER",
    "UNAVAILABLE_STATUS",
    "EnvironmentUnavailable",
    "GuiEnvironment",
    "python_host_paths",
    "select_python",
    "server_python",
]

# The environment servers' own Python (scripts/install-harnesses.sh): a venv on the system
# Python under /opt, which every local sandbox sees and its unprivileged uid may read. The
# GUI image (deploy/build-gui-image.sh) has it at the same place.
GUI_PREFIX = "/opt/openforge/gui"
GUI_PYTHON = f"{GUI_PREFIX}/bin/python"
_GUI_PYTHON = Path(GUI_PYTHON)
# The exit status of a wrapped harness whose environment did not come up: its verifier then
# finds no result, so the rollout is an infrastructure error, never a reward of 0.
UNAVAILABLE_STATUS = 96
# Put beside a GUI task's verifier (in its own directory, which the agent cannot write) by
# the orchestrator: ``{"answer": str | null}``, the final answer the policy stated, read from
# the gateway's record of its last reply (``rollouts/recorded.py``). A verifier that grades
# an answer reads it only here: the environment's result file is in the agent's reach.
STATED_ANSWER = "stated-answer.json"


class EnvironmentUnavailable(SandboxError):
    """An environment cannot be set up here (a missing binary or package): infra, never 0."""


@runtime_checkable
class GuiEnvironment(Protocol):
    """What runs beside the harness: set up, wrapped around the harness's command."""

    def host_paths(self) -> tuple[str, ...]:
        """Host paths the local backend must show read-only for the environment to run."""
        ...

    async def prepare(self, box: Sandbox, home: str) -> None:
        """Copy the environment's server and config into ``box`` (under ``home``)."""
        ...

    def wrap_argv(self, argv: list[str], home: str) -> list[str]:
        """``argv`` (the harness) run between the environment's start and its stop."""
        ...

    def evidence_in_sandbox(self) -> str:
        """What of the task's reward evidence lies in the sandbox where a harness with a
        shell could write it (a result file, an app's database), in words; empty when a
        shell could write nothing the task's own actions cannot."""
        ...


def python_host_paths() -> tuple[str, ...]:
    """Nothing when the servers run with :data:`GUI_PREFIX`'s Python (under /opt, always
    visible); else this Python's prefix (the venv with the GUI extra) and its base install,
    resolved, since the venv's interpreter is a link into the base install. That fallback
    works only where the sandbox's uid may read them (``LocalBackend(sandbox_uid="caller")``:
    a pyenv under /root is closed to the unprivileged default)."""
    if _GUI_PYTHON.is_file():
        return ()
    paths = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    # A venv reached through a symlink must also exist at the path sys.executable names.
    paths.add(str(Path(sys.prefix).absolute()))
    return tuple(sorted(paths))


def server_python(package: str, what: str) -> str:
    """The Python that runs an environment's server on this machine (a bench's teacher, a
    test): :data:`GUI_PREFIX`'s, else this one, which must then have ``package``. In a
    sandbox the choice is made there (:func:`select_python`)."""
    if _GUI_PYTHON.is_file():
        return str(_GUI_PYTHON)
    if importlib.util.find_spec(package) is None:
        raise EnvironmentUnavailable(
            f"the {what} needs {package}: bash scripts/install-harnesses.sh "
            f"(the venv {GUI_PREFIX}) or pip install 'openforge[gui]'"
        )
    return sys.executable


def select_python(package: str, what: str) -> str:
    """Shell lines that set ``$py`` to the Python that runs an environment's server, chosen
    inside the sandbox, whose files may not be the host's (a container, a pod): :data:`GUI_PYTHON`
    where the sandbox has it, else this process's Python when it has ``package`` (a local
    sandbox shows it: :func:`python_host_paths`). With neither, the exec ends with
    :data:`UNAVAILABLE_STATUS` saying what to install."""
    lines = [f"py={shlex.quote(GUI_PYTHON)}"]
    if importlib.util.find_spec(package) is not None:
        lines.append(f'[ -x "$py" ] || py={shlex.quote(sys.executable)}')
    why = (
        f"the {what} needs a Python with {package} in the sandbox: {GUI_PREFIX} "
        "(scripts/install-harnesses.sh; the GUI image of deploy/build-gui-image.sh has it)"
    )
    lines.append(f'[ -x "$py" ] || {{ echo {shlex.quote(why)} >&2; exit {UNAVAILABLE_STATUS}; }}')
    return "\n".join(lines)
