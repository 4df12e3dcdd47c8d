"""The interface every GUI environment offers the orchestrator, and what they share.

An environment runs inside the harness's own exec: :meth:`GuiEnvironment.wrap_argv` starts it,
runs the harness, and stops it, so nothing it started outlives the harness (the exec's PID
namespace ends with it, also on a timeout or a cancel).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Protocol, runtime_checkable

from openforge.sandboxes.base import Sandbox, SandboxError

__all__ = [
    "GUI_PREFIX",
    "EnvironmentUnavailable",
    "GuiEnvironment",
    "python_host_paths",
    "server_python",
]

# The environment servers' own Python (scripts/install-harnesses.sh): a venv on the system
# Python under /opt, which every local sandbox sees and its unprivileged uid may read.
GUI_PREFIX = "/opt/openforge/gui"
_GUI_PYTHON = Path(GUI_PREFIX, "bin", "python")


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
    """The Python that runs an environment's server: :data:`GUI_PREFIX`'s, else this one,
    which must then have ``package``."""
    if _GUI_PYTHON.is_file():
        return str(_GUI_PYTHON)
    if importlib.util.find_spec(package) is None:
        raise EnvironmentUnavailable(
            f"the {what} needs {package}: bash scripts/install-harnesses.sh "
            f"(the venv {GUI_PREFIX}) or pip install 'openforge[gui]'"
        )
    return sys.executable
