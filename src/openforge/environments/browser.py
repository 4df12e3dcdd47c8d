"""The browser environment of the GUI setting, as the orchestrator sets it up in a sandbox.

A task that declares a :class:`BrowserEnvironment` gets, in its sandbox, the environment
server (:mod:`openforge.guest.browser_server`: headless Chromium under Playwright)
started before the harness and stopped after it, in the same exec: the harness finds it at
``$OPENFORGE_BROWSER_URL``. The server writes the task's reward state to
:data:`RESULT_FILE` after every action; the task's verifier (:data:`VERIFY_SCRIPT`) reads it.

The server runs with the GUI venv under /opt (:data:`openforge.environments.base.GUI_PREFIX`),
else this process's own Python made visible read-only (:meth:`BrowserEnvironment.host_paths`),
and drives the sandbox's ``chromium``: both are looked up inside the sandbox, so a container
or pod running the GUI image (``deploy/build-gui-image.sh``) finds its own.
Because the server and every Chromium process live in the exec's PID namespace, ending the
exec (the harness finished, timed out or was cancelled) ends the browser too.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import asdict, dataclass, field

import orjson

from openforge.environments.base import (
    STATED_ANSWER,
    UNAVAILABLE_STATUS,
    EnvironmentUnavailable,
    python_host_paths,
    select_python,
)
from openforge.guest import bundle
from openforge.guest.common import GUI_DIR
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.runtime import SANDBOX_HOME

__all__ = [
    "APP_DB",
    "BROWSER_URL_ENV",
    "CDP_URL_ENV",
    "RESULT_FILE",
    "SHOTS_DIR",
    "VERIFY_SCRIPT",
    "BrowserEnvironment",
    "chromium_path",
    "prepare",
    "verify_script",
    "wrap_argv",
]

BROWSER_URL_ENV = "OPENFORGE_BROWSER_URL"
# Chromium's DevTools endpoint, for harnesses that drive the browser themselves.
CDP_URL_ENV = "OPENFORGE_BROWSER_CDP_URL"
# Under the sandbox's HOME (never the workspace the agent's files live in).
RESULT_FILE = f"{GUI_DIR}/result.json"
# The bundled web apps' SQLite database (their server state, read by their verifiers).
APP_DB = f"{GUI_DIR}/app.db"
# The last screenshots, when a task keeps them (``NNNN.png``, in order).
SHOTS_DIR = f"{GUI_DIR}/shots"
_APP_SERVER = f"{GUI_DIR}/webapps_server.pyz"
_SERVER = f"{GUI_DIR}/browser_server.pyz"
_CONFIG = f"{GUI_DIR}/browser.json"
_PORT = f"{GUI_DIR}/port"
_LOG = f"{GUI_DIR}/server.log"
VERIFY_SCRIPT = "gui_result.py"


@dataclass(frozen=True, slots=True)
class BrowserEnvironment:
    """What the browser shows and how the task's reward is read from it.

    ``start_url`` is opened first: a path relative to the workspace (then ``site_root``,
    relative too, is served over HTTP on the sandbox's loopback, and the page opened
    there) or a URL (then ``file://`` pages under an absolute ``site_root`` are allowed);
    ``setup_js`` runs once it has loaded; ``goal_js`` returns the goal as the page states
    it; ``reward_js`` (a function or an expression) returns ``{done, reward in [0, 1], raw,
    reason}`` and is evaluated after every action, in the task's page and only while the
    document the environment loaded is on top there; elements matching ``skip_selector``
    are left out of observations. ``allowed_origins`` are the only http(s) origins the page
    may reach or show (with the task's own site and ``about:blank``).
    """

    start_url: str
    site_root: str = ""
    goal: str = ""
    goal_js: str = ""
    setup_js: str = ""
    reward_js: str = ""
    allowed_origins: tuple[str, ...] = ()
    # Parts of the page that are not the task's (a benchmark's own score display).
    skip_selector: str = ""
    viewport: tuple[int, int] = (800, 600)
    settle_ms: int = 100
    # A bundled web app (suites/webapps/server.py: shop, mail, booking, wiki) to serve in
    # the sandbox; ``start_url`` is then a path on it ("/shop/"), its state at :data:`APP_DB`.
    app: str = ""
    # Keep the last N screenshots (one after each action and one at the end) for a judge.
    keep_screenshots: int = 0
    # A Chromium binary to use (not part of a task's file); empty: the server takes the
    # sandbox's own ``chromium``, which need not be where the host has one.
    chromium: str = field(default="", compare=False)

    def host_paths(self) -> tuple[str, ...]:
        """The server's Python (Playwright's venv) for the local backend."""
        return python_host_paths()

    async def prepare(self, box: Sandbox, home: str) -> None:
        """Copy the server and this config into ``box``."""
        await prepare(box, self, home)

    def wrap_argv(self, argv: list[str], home: str) -> list[str]:
        """``argv`` run with the browser up (see :func:`wrap_argv`)."""
        return wrap_argv(argv, home)

    def evidence_in_sandbox(self) -> str:
        """The result file (reward state, answer, action record) and, for a web app, its
        database, and a judge's screenshots: the environment's server writes them in the
        sandbox's HOME, as the sandbox's uid."""
        parts = [f"the browser environment's result file (~/{RESULT_FILE})"]
        if self.app:
            parts.append(f"the web apps' database (~/{APP_DB})")
        if self.keep_screenshots:
            parts.append(f"the judge's screenshots (~/{SHOTS_DIR})")
        return ", ".join(parts)


def chromium_path() -> str:
    """This machine's Chromium binary (Debian's ``chromium``), for a server run outside a
    sandbox; :class:`EnvironmentUnavailable` if absent."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise EnvironmentUnavailable(
            "the browser environment needs Chromium: apt-get install chromium chromium-driver"
        )
    return found


async def prepare(box: Sandbox, env: BrowserEnvironment, home: str) -> None:
    """Copy the server and its config into ``box`` (under ``home``)."""
    config = asdict(env)
    # Bundled, not imported: it needs Playwright, which only the sandbox's Python must have.
    files = {f"{home}/{_SERVER}": bundle("browser_server")}
    if env.app:
        config["app_server"] = f"{home}/{_APP_SERVER}"
        config["app_db"] = f"{home}/{APP_DB}"
        files[config["app_server"]] = bundle("webapps_server")
    files[f"{home}/{_CONFIG}"] = orjson.dumps(config)
    await box.put(files)


def wrap_argv(argv: list[str], home: str, python: str | None = None) -> list[str]:
    """The harness's ``argv`` run between the environment server's start and its orderly stop.

    The server's port reaches the harness as ``$OPENFORGE_BROWSER_URL`` and Chromium's
    DevTools endpoint as ``$OPENFORGE_BROWSER_CDP_URL``; a server that cannot start (no
    Python with Playwright in the sandbox) or dies before it is ready ends the exec with
    status 96 (an infrastructure failure the verifier then reports: no result file).
    ``python`` is the server's Python; by default the sandbox's own (:func:`select_python`).
    """
    if python:
        pick = f"py={shlex.quote(python)}"
    else:
        pick = select_python("playwright", "browser environment")
    d = shlex.quote(f"{home}/{GUI_DIR}")
    script = f"""d={d}
{pick}
rm -rf "$d/port" "$d/cdp" "$d/result.json" "$d/shots"
"$py" -I "$d/browser_server.pyz" --config "$d/browser.json" --port-file "$d/port" \\
  --cdp-port-file "$d/cdp" --result "$d/result.json" >"$d/server.log" 2>&1 &
srv=$!
while [ ! -s "$d/port" ]; do
  if ! kill -0 $srv 2>/dev/null; then
    echo "browser environment failed:" >&2; tail -5 "$d/server.log" >&2; exit {UNAVAILABLE_STATUS}
  fi
  sleep 0.05
done
export {BROWSER_URL_ENV}="http://127.0.0.1:$(cat "$d/port")"
export {CDP_URL_ENV}="http://127.0.0.1:$(cat "$d/cdp")"
"$@"
rc=$?
kill -TERM $srv 2>/dev/null
wait $srv
exit $rc
"""
    return ["/bin/sh", "-c", script, "openforge-browser", *argv]


def verify_script(answer: tuple[str, ...] = (), page_reward: bool = True) -> bytes:
    """The verifier every browser task runs: the reward state the server last wrote.

    ``answer``: the agent's answer must also contain each of these (any case), else 0 (the
    answer its policy stated, put beside the verifier as :data:`STATED_ANSWER` by the
    orchestrator; never the result file's copy, which the sandbox's uid can write);
    ``page_reward=False`` (a task rewarded by its answer alone): 1 when the answer holds.

    The orchestrator verifies only rollouts whose environment came up (an exec that ended
    with :data:`UNAVAILABLE_STATUS` is ``infra_error`` before any verifier runs), and the
    server writes its result as soon as it is up: a result missing or unreadable now was
    removed or spoiled from inside the sandbox, the agent's doing, so it scores 0 — never
    ``infra_error``, which would mask the failure from training. The same for an ``error``
    in it: the server writes one only before it is up.
    """
    return f"""import json, os, sys
# The agent's home, where the environment wrote (a verifier's own $HOME may be another).
path = os.path.join({SANDBOX_HOME!r}, {RESULT_FILE!r})
try:
    with open(path, encoding="utf-8") as f:
        state = json.load(f)
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
except (OSError, ValueError) as exc:
    why = "the environment's result is gone or unreadable: %s" % exc
    print(json.dumps({{"reward": 0.0, "details": {{"done": False, "why_zero": why}}}}))
    sys.exit(0)
if state.get("error"):
    # Written only before the environment was up, whose failure the orchestrator has told
    # already: here it can only have been written from inside the sandbox.
    why = "the result says error: %s" % str(state["error"])[:200]
    print(json.dumps({{"reward": 0.0, "details": {{"done": False, "why_zero": why}}}}))
    sys.exit(0)
reward = min(1.0, max(0.0, float(state.get("reward") or 0.0))) if {page_reward!r} else 1.0
try:  # the answer the policy stated, as the gateway recorded it: never the result's copy
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), {STATED_ANSWER!r})) as f:
        stated = json.load(f).get("answer")
except (OSError, ValueError, AttributeError):
    stated = None
state["answer"] = stated
said = str(stated or "").lower()
if not all(a.lower() in said for a in {list(answer)!r}):
    state["why_zero"] = "the answer does not hold what the task asks"
    reward = 0.0
print(json.dumps({{"reward": reward, "details": state}}))
""".encode()
