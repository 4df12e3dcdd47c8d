"""The GUI sections of OpenForge's own ``task.toml``: ``[browser]`` and ``[desktop]``.

A user's own browser task::

    [browser]
    site = "site"                  # a directory of the task, served inside the sandbox
    start = "index.html"           # a page of the site (or an http(s) URL, then no site)
    allowed_sites = []             # other http(s) origins the page may load or show
    viewport = [800, 600]          # optional
    setup_js = ""                  # optional: run once the start page has loaded

    [browser.reward]               # one or both of:
    js_file = "reward.js"          # (or js = "…") run in the task's page after every action:
                                   #   returns {done, reward in [0, 1], raw, reason}
    answer = ["42"]                # the agent's Answer must contain each (any case)

Or, instead of ``site``, ``app = "shop"`` (a bundled web app, ``suites/webapps``; ``start``
a path on it) with ``[[browser.reward.check]]`` tables (``sql``, ``expect``) read from the
apps' database after the agent stopped, as ``webapp.toml``'s checks are.

The page's reward is read as MiniWoB's is (``environments/browser.py``): only in the document
the environment loaded, on the task's tab; the page goes only to the task's sites and
``about:blank``. A user's OSWorld-style desktop task::

    [desktop]
    screen = [1280, 800]           # optional

    [[desktop.setup]]              # in order: launch (in the background) | execute |
    type = "launch"                #   command (waited for) | sleep
    command = ["mousepad", "/workspace/notes.txt"]   # a list, or a string with shell = true

    [desktop.check]                # OSWorld's evaluator (func, result, expected, options,
    func = "compare_text_file"     #   conj); a cloud_file's dest is files/<dest> of the task
    result = {type = "vm_file", path = "/workspace/notes.txt"}
    expected = {type = "cloud_file", dest = "notes.txt"}

Without ``[desktop.check]`` the task's own ``verify/`` scores a desktop task; a browser
task's reward is always its ``[browser.reward]`` (``verify/`` is then refused). Every key is
checked strictly; an error names ``task.toml`` and the field (``browser.reward.js_file``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from openforge.environments.browser import VERIFY_SCRIPT, BrowserEnvironment, verify_script
from openforge.environments.desktop import ConfigStep, DesktopEnvironment
from openforge.suites.osworld.loader import (
    EVALUATOR,
    EVALUATOR_COMMAND,
    check_evaluator,
    evaluator_bundle,
)
from openforge.suites.webapps.loader import APPS, read_checks
from openforge.suites.webapps.loader import verify_script as webapp_verify_script
from openforge.tasks.model import Task, TaskError, check_keys, collect_dir, inside
from openforge.tasks.native import NativeSection, SectionLoader, load_native

__all__ = ["SECTIONS", "SITE_DIR", "browser_section", "desktop_section", "load_native_task"]

# Where the site's files go in the workspace (the page is served from there).
SITE_DIR = "site"
_BROWSER_KEYS = ("site", "start", "app", "allowed_sites", "viewport", "setup_js", "reward")
_REWARD_KEYS = ("js", "js_file", "check", "answer")
_APP_VERIFY = "webapp_verify.py"
_DESKTOP_KEYS = ("screen", "setup", "check")
_STEP_KEYS = ("type", "command", "shell", "seconds")
_STEP_TYPES = ("launch", "execute", "command", "sleep")
_CHECK_KEYS = ("func", "result", "expected", "options", "conj")


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a browser task starts and what it may reach."""

    start_url: str
    site_root: str
    origins: list[str]
    workspace: dict[str, Path]
    app: str


def _string(file: Path, table: dict[str, Any], key: str, where: str, default: str = "") -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise TaskError(file, where, f"must be a string, got {value!r}")
    return value


def _size(
    file: Path, table: dict[str, Any], key: str, where: str, default: tuple[int, int]
) -> tuple[int, int]:
    value = table.get(key, list(default))
    ok = isinstance(value, list) and len(value) == 2
    if not ok or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 8192 for v in value
    ):
        raise TaskError(file, where, f"must be [width, height] in pixels, got {value!r}")
    return int(value[0]), int(value[1])


def _origin(file: Path, value: Any, where: str) -> str:
    """An http(s) origin (``https://host[:port]``, no path), or a TaskError."""
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise TaskError(
            file, where, f"must be an http(s) origin like https://example.org, got {value!r}"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise TaskError(file, where, f"an origin has no path: {parts.scheme}://{parts.netloc}")
    return f"{parts.scheme}://{parts.netloc}"


def _reward_js(file: Path, root: Path, reward: dict[str, Any]) -> str:
    if "js" in reward and "js_file" in reward:
        raise TaskError(file, "browser.reward.js_file", "give js or js_file, not both")
    if "js_file" in reward:
        rel = _string(file, reward, "js_file", "browser.reward.js_file")
        path = inside(root, rel, file, "browser.reward.js_file")
        if not path.is_file():
            raise TaskError(file, "browser.reward.js_file", f"file {rel!r} not found")
        try:
            js = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskError(file, "browser.reward.js_file", f"cannot be read: {exc}") from exc
        field = "browser.reward.js_file"
    else:
        js = _string(file, reward, "js", "browser.reward.js")
        field = "browser.reward.js"
    if ("js" in reward or "js_file" in reward) and not js.strip():
        raise TaskError(file, field, "is empty: a function or expression returning {done, reward}")
    return js.strip()


def _answer(file: Path, reward: dict[str, Any]) -> tuple[str, ...]:
    value = reward.get("answer", [])
    if not isinstance(value, list) or not all(isinstance(a, str) and a.strip() for a in value):
        raise TaskError(
            file, "browser.reward.answer", f"must be a list of non-empty strings, got {value!r}"
        )
    return tuple(a.strip() for a in value)


def _site(file: Path, root: Path, table: dict[str, Any]) -> _Where:
    """Where the browser starts: the task's site, a URL or a bundled web app."""
    start = _string(file, table, "start", "browser.start").strip()
    allowed = table.get("allowed_sites", [])
    if not isinstance(allowed, list):
        raise TaskError(
            file, "browser.allowed_sites", f"must be a list of origins, got {allowed!r}"
        )
    origins = [_origin(file, o, f"browser.allowed_sites[{i}]") for i, o in enumerate(allowed)]
    app = _string(file, table, "app", "browser.app")
    if app:
        if app not in APPS:
            raise TaskError(file, "browser.app", f"must be one of {', '.join(APPS)}, got {app!r}")
        if "site" in table:
            raise TaskError(file, "browser.site", "an app task is served by the app, not a site")
        start = start or f"/{app}/"
        if not start.startswith("/"):
            raise TaskError(file, "browser.start", f"with app: a path on its server, not {start!r}")
        return _Where(start, "", origins, {}, app)
    if not start:
        raise TaskError(file, "browser.start", "missing: a page of the site, or an http(s) URL")
    if "://" in start:
        if "site" in table:
            why = "a site is served only when start is one of its pages, not a URL"
            raise TaskError(file, "browser.site", why)
        parts = urlsplit(start)
        origins.insert(0, _origin(file, f"{parts.scheme}://{parts.netloc}", "browser.start"))
        return _Where(start, "", origins, {}, "")
    site = _string(file, table, "site", "browser.site", SITE_DIR).strip().rstrip("/")
    if not site or not inside(root, site, file, "browser.site").is_dir():
        raise TaskError(file, "browser.site", f"directory {site!r} not found beside task.toml")
    if not inside(root / site, start, file, "browser.start").is_file():
        raise TaskError(file, "browser.start", f"page {start!r} not found in {site}/")
    files = collect_dir(root, site, "browser.site")
    workspace = {f"{SITE_DIR}/{rel}": p for rel, p in files.items()}
    return _Where(f"{SITE_DIR}/{start}", f"{SITE_DIR}/", origins, workspace, "")


def browser_section(file: Path, root: Path, table: dict[str, Any]) -> NativeSection:
    """``[browser]``: the site, start URL or app, the allowed sites and the reward."""
    check_keys(file, table, _BROWSER_KEYS, "browser.")
    where = _site(file, root, table)
    reward = table.get("reward")
    if not isinstance(reward, dict):
        raise TaskError(
            file, "browser.reward", "missing: a table with js, js_file, check or answer"
        )
    check_keys(file, reward, _REWARD_KEYS, "browser.reward.")
    js, answer = _reward_js(file, root, reward), _answer(file, reward)
    checks = read_checks(file, reward.get("check"), "browser.reward.check")
    if checks and not where.app:
        raise TaskError(file, "browser.reward.check", "reads a web app's database: set app")
    if js and where.app:
        raise TaskError(
            file, "browser.reward.js", "an app task is scored by its server state: use check"
        )
    if not (js or answer or checks):
        raise TaskError(file, "browser.reward", "needs js, js_file, check or answer")
    env = BrowserEnvironment(
        start_url=where.start_url,
        site_root=where.site_root,
        setup_js=_string(file, table, "setup_js", "browser.setup_js"),
        reward_js=js,
        allowed_origins=tuple(dict.fromkeys(where.origins)),
        viewport=_size(file, table, "viewport", "browser.viewport", (800, 600)),
        app=where.app,
    )
    if where.app:
        script, name = webapp_verify_script(checks, list(answer)), _APP_VERIFY
    else:
        script, name = verify_script(answer, page_reward=bool(js)), VERIFY_SCRIPT
    return NativeSection(
        gui=env,
        workspace=where.workspace,
        verify_extra={name: script},
        verify_command=f"python3 .openforge-verify/{name}",
        tags=("gui", "browser", *((where.app,) if where.app else ())),
    )


def _setup(file: Path, value: Any) -> tuple[ConfigStep, ...]:
    if not isinstance(value, list):
        raise TaskError(file, "desktop.setup", "must be an array of tables ([[desktop.setup]])")
    steps = []
    for i, step in enumerate(value):
        where = f"desktop.setup[{i}]"
        if not isinstance(step, dict):
            raise TaskError(file, where, "must be a table with type and command (or seconds)")
        check_keys(file, step, _STEP_KEYS, f"{where}.")
        kind = step.get("type")
        if kind not in _STEP_TYPES:
            raise TaskError(
                file, f"{where}.type", f"must be one of {', '.join(_STEP_TYPES)}, got {kind!r}"
            )
        shell = step.get("shell", False)
        if not isinstance(shell, bool):
            raise TaskError(file, f"{where}.shell", f"must be true or false, got {shell!r}")
        command = step.get("command", "" if shell else [])
        if kind == "sleep":
            seconds = step.get("seconds")
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not 0 <= seconds <= 600
            ):
                raise TaskError(
                    file, f"{where}.seconds", f"must be seconds (0-600), got {seconds!r}"
                )
            steps.append(ConfigStep(type="sleep", seconds=float(seconds)))
            continue
        if shell and not (isinstance(command, str) and command.strip()):
            raise TaskError(file, f"{where}.command", "with shell = true: a non-empty string")
        if not shell and not (
            isinstance(command, list) and command and all(isinstance(c, str) for c in command)
        ):
            raise TaskError(
                file,
                f"{where}.command",
                f"must be a list of strings (or a string with shell = true), got {command!r}",
            )
        steps.append(
            ConfigStep(type=kind, command=command if shell else tuple(command), shell=shell)
        )
    return tuple(steps)


def desktop_section(file: Path, root: Path, table: dict[str, Any]) -> NativeSection:
    """``[desktop]``: the screen, the OSWorld-style setup steps and, optionally, the check."""
    check_keys(file, table, _DESKTOP_KEYS, "desktop.")
    env = DesktopEnvironment(
        steps=_setup(file, table.get("setup", [])),
        screen=_size(file, table, "screen", "desktop.screen", (1280, 800)),
    )
    check = table.get("check")
    if check is None:
        return NativeSection(gui=env, tags=("gui", "desktop"))
    if not isinstance(check, dict):
        raise TaskError(file, "desktop.check", "must be a table ([desktop.check])")
    check_keys(file, check, _CHECK_KEYS, "desktop.check.")
    files = check_evaluator(file, check, root, "desktop.check")
    return NativeSection(
        gui=env,
        verify=files,
        verify_extra={
            EVALUATOR: evaluator_bundle(),
            "task.json": json.dumps({"evaluator": check}).encode(),
        },
        verify_command=EVALUATOR_COMMAND,
        tags=("gui", "desktop"),
    )


SECTIONS: dict[str, SectionLoader] = {"browser": browser_section, "desktop": desktop_section}


def load_native_task(root: Path) -> Task:
    """A native task directory with its GUI section (``[browser]``, ``[desktop]``) read."""
    return load_native(root, SECTIONS)
