"""The desktop environment of the GUI setting: Xvfb, openbox and PyAutoGUI in the sandbox.

The launch starts ``Xvfb`` (it picks a free display itself: ``-displayfd``), the ``openbox``
window manager and the environment server (:mod:`openforge.guest.desktop_server`), which runs
the task's OSWorld-style setup steps and then serves screenshots and actions in OSWorld's
``pyautogui`` and ``computer_13`` action spaces. The harness gets ``$DISPLAY`` and
``$OPENFORGE_DESKTOP_URL``. Everything runs in the harness's exec and ends with it.

Needs Debian's ``xvfb``, ``openbox`` (``scripts/setup.sh``) and the apps a task launches,
and a Python with ``pyautogui``: the GUI venv under /opt, else the ``gui`` extra's. All are
looked up inside the sandbox, so a container or pod running the GUI image
(``deploy/build-gui-image.sh``) finds its own.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import orjson

from openforge.environments.base import UNAVAILABLE_STATUS, python_host_paths, select_python
from openforge.guest import bundle
from openforge.guest.common import GUI_DIR
from openforge.sandboxes.base import Sandbox

__all__ = ["DESKTOP_RESULT_FILE", "DESKTOP_URL_ENV", "ConfigStep", "DesktopEnvironment"]

DESKTOP_URL_ENV = "OPENFORGE_DESKTOP_URL"
# The agent's DONE/FAIL and step count, under the sandbox's HOME: the evaluator reads it.
DESKTOP_RESULT_FILE = f"{GUI_DIR}/desktop-result.json"


@dataclass(frozen=True, slots=True)
class ConfigStep:
    """One OSWorld ``config`` step: ``launch`` (in the background), ``execute`` or
    ``command`` (waited for), ``sleep``."""

    type: str
    command: tuple[str, ...] | str = ()
    shell: bool = False
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class DesktopEnvironment:
    """A virtual screen of ``screen`` pixels, set up by ``steps``."""

    steps: tuple[ConfigStep, ...] = ()
    screen: tuple[int, int] = (1280, 800)

    def host_paths(self) -> tuple[str, ...]:
        """The server's Python (PyAutoGUI's venv) for the local backend."""
        return python_host_paths()

    async def prepare(self, box: Sandbox, home: str) -> None:
        """Copy the server and the setup steps into ``box``."""
        steps = [
            {
                "type": s.type,
                "parameters": {
                    "command": list(s.command) if isinstance(s.command, tuple) else s.command,
                    "shell": s.shell,
                    "seconds": s.seconds,
                },
            }
            for s in self.steps
        ]
        await box.put(
            {
                f"{home}/{GUI_DIR}/desktop_server.pyz": bundle("desktop_server"),
                f"{home}/{GUI_DIR}/desktop.json": orjson.dumps({"steps": steps}),
            }
        )

    def evidence_in_sandbox(self) -> str:
        """Nothing a shell adds: an OSWorld evaluator reads the files the task asks the
        agent to change, and the result file's DONE/FAIL is the agent's own say; the
        desktop's ``pyautogui`` actions run any Python in the sandbox anyway (OSWorld's
        action space), so a shell harness reaches no more than the task's actions do."""
        return ""

    def wrap_argv(self, argv: list[str], home: str) -> list[str]:
        """``argv`` run with the display, the window manager and the server up.

        Status 96: Xvfb, openbox or the server's Python is missing in the sandbox, or the
        display or the server did not come up (the orchestrator's ``infra_error``; the server
        writes its result file before it is ready).
        """
        d = shlex.quote(f"{home}/{GUI_DIR}")
        w, h = self.screen
        script = f"""d={d}
for b in Xvfb openbox; do
  command -v $b >/dev/null || {{
    echo "the desktop environment needs $b in the sandbox: apt-get install xvfb openbox" \\
      "(the GUI image of deploy/build-gui-image.sh has them)" >&2; exit {UNAVAILABLE_STATUS}; }}
done
{select_python("pyautogui", "desktop environment")}
fail() {{
  echo "desktop environment failed: $1" >&2; tail -5 "$d/$2" >&2; exit {UNAVAILABLE_STATUS}
}}
rm -f "$d/display" "$d/dport" "$d/desktop-result.json"
Xvfb -displayfd 5 -screen 0 {int(w)}x{int(h)}x24 -nolisten tcp 5>"$d/display" \\
  2>"$d/xvfb.log" &
x=$!
while [ ! -s "$d/display" ]; do kill -0 $x 2>/dev/null || fail Xvfb xvfb.log; sleep 0.05; done
export DISPLAY=":$(cat "$d/display")"
# Xvfb runs without -auth (local clients only); python-xlib still wants the file to exist.
export XAUTHORITY="$d/Xauthority"
: >"$XAUTHORITY"
openbox >"$d/openbox.log" 2>&1 &
wm=$!
"$py" -I "$d/desktop_server.pyz" --config "$d/desktop.json" --port-file "$d/dport" \\
  --result "$d/desktop-result.json" >"$d/desktop-server.log" 2>&1 &
srv=$!
while [ ! -s "$d/dport" ]; do
  kill -0 $srv 2>/dev/null || fail server desktop-server.log; sleep 0.05
done
export {DESKTOP_URL_ENV}="http://127.0.0.1:$(cat "$d/dport")"
"$@"
rc=$?
kill -TERM $srv 2>/dev/null; wait $srv
kill -TERM $wm $x 2>/dev/null; wait
exit $rc
"""
        return ["/bin/sh", "-c", script, "openforge-desktop", *argv]
