"""The in-sandbox browser environment server: headless Chromium under Playwright, over HTTP.

Shipped into the sandbox as a zipapp and run there with a Python that has ``playwright`` (the
sandbox's own, or the host's made visible read-only by the local backend). Standard library,
:mod:`openforge.guest.common` and Playwright only: no OpenForge install inside the sandbox.
It listens on 127.0.0.1 inside the sandbox, writes its port to ``--port-file`` and serves,
one request at a time (the Playwright sync API is single-threaded):

    GET  /observation?mode=axtree|som|screenshot   page state; ``som`` and ``screenshot``
                                                  carry a base64 PNG
    POST /action   {"action": "click", "id": 3}   click · type · select · key · scroll · goto
                                                  · back · tab · answer
    GET  /result                                  the task's reward state
    GET  /sites                                   the task's http(s) origins

After every action it evaluates the task's reward JavaScript, in the task's own page and
only while the document it loaded is that page's top document (not a ``data:`` page, a
reload or another page the agent went to), and writes the result file (``--result``)
atomically, so a rollout killed mid-step still leaves its last state for the
verifier; between requests it polls that state too, so a harness that drives Chromium
over DevTools (``--cdp-port-file``) is scored the same. A task's own pages are served over
HTTP on the sandbox's loopback. Requests the page makes go only to that site and the
allowed origins; everything else is aborted (the sandbox's network policy stands behind
that).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import HTTPServer, SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Route, sync_playwright

from openforge.guest.common import JsonHandler, serve_until_term, write_text

# Marks every visible element that is interactive or carries its own text with a
# ``data-of-id`` and returns them in document order with role, name, box and depth.
_LABEL_JS = """(skip) => {
  document.querySelectorAll('[data-of-id]').forEach(e => e.removeAttribute('data-of-id'));
  const INTERACTIVE = 'a,button,input,select,textarea,summary,label,[role],[onclick],'
    + '[tabindex],[contenteditable=true]';
  const roleOf = e => {
    const r = e.getAttribute('role'); if (r) return r;
    const t = e.tagName.toLowerCase();
    if (t === 'a') return 'link';
    if (t === 'button') return 'button';
    if (t === 'select') return 'combobox';
    if (t === 'textarea') return 'textbox';
    if (t === 'input') {
      const ty = (e.getAttribute('type') || 'text').toLowerCase();
      if (ty === 'checkbox' || ty === 'radio') return ty;
      if (ty === 'button' || ty === 'submit' || ty === 'reset') return 'button';
      return 'textbox';
    }
    if (t === 'label') return 'label';
    return e.matches(INTERACTIVE) ? 'clickable' : 'text';
  };
  const ownText = e => Array.from(e.childNodes).filter(n => n.nodeType === 3)
    .map(n => n.textContent).join(' ').replace(/\\s+/g, ' ').trim();
  const visible = e => {
    const s = getComputedStyle(e);
    if (s.visibility === 'hidden' || s.display === 'none' || +s.opacity === 0) return false;
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const out = [];
  const walk = (node, depth) => {
    for (const e of node.children) {
      if (e.tagName === 'SCRIPT' || e.tagName === 'STYLE' || (skip && e.matches(skip))) continue;
      let d = depth;
      if (visible(e)) {
        const interactive = e.matches(INTERACTIVE) || getComputedStyle(e).cursor === 'pointer';
        const text = ownText(e);
        if (interactive || text) {
          const r = e.getBoundingClientRect();
          const name = (e.getAttribute('aria-label') || text || e.getAttribute('placeholder')
            || e.getAttribute('title') || e.getAttribute('alt') || '').slice(0, 120);
          const id = out.length + 1;
          e.setAttribute('data-of-id', String(id));
          const box = [r.left, r.top, r.width, r.height].map(Math.round);
          const item = {id, role: roleOf(e), name, depth, box};
          if ('value' in e && typeof e.value === 'string' && e.tagName !== 'BUTTON') {
            item.value = e.value.slice(0, 120);
          }
          if (e.type === 'checkbox' || e.type === 'radio') item.checked = !!e.checked;
          // A closed list's options have no box of their own: listed on the list.
          if (e.tagName === 'SELECT') {
            item.options = Array.from(e.options).slice(0, 50).map(o => o.text.trim());
          }
          out.push(item);
          d = depth + 1;
        }
      }
      walk(e, d);
    }
  };
  walk(document.body || document.documentElement, 0);
  return out;
}"""

# Draws a numbered box over each labelled element (set-of-marks); removed after the shot.
_MARKS_JS = """(items) => {
  const layer = document.createElement('div');
  layer.id = '__of_marks';
  layer.style.cssText = 'position:fixed;left:0;top:0;width:0;height:0;'
    + 'z-index:2147483647;pointer-events:none';
  for (const it of items) {
    if (it.role === 'text') continue;
    const [x, y, w, h] = it.box;
    const b = document.createElement('div');
    b.style.cssText = `position:fixed;left:${x}px;top:${y}px;width:${w}px;height:${h}px;`
      + 'border:1px solid #e00;box-sizing:border-box';
    const t = document.createElement('span');
    t.textContent = String(it.id);
    t.style.cssText = 'position:absolute;left:0;top:-1px;background:#e00;color:#fff;'
      + 'font:10px monospace;padding:0 1px';
    b.appendChild(t); layer.appendChild(b);
  }
  document.documentElement.appendChild(layer);
}"""
_UNMARK_JS = "() => { const l = document.getElementById('__of_marks'); if (l) l.remove(); }"

_KEYS = {
    "enter": "Enter",
    "tab": "Tab",
    "escape": "Escape",
    "backspace": "Backspace",
    "space": " ",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "delete": "Delete",
    "home": "Home",
    "end": "End",
    "pageup": "PageUp",
    "pagedown": "PageDown",
}


class ActionError(Exception):
    """An action the page cannot do (unknown element, bad argument): told to the agent."""


def _chromium(config: dict[str, Any]) -> str:
    """The Chromium to launch: the config's, else the sandbox's own (looked up here, not on
    the host, whose files a container or pod does not have)."""
    found = config.get("chromium") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit(
            "the browser environment needs Chromium in the sandbox: apt-get install chromium "
            "(the GUI image of deploy/build-gui-image.sh has it)"
        )
    return str(found)


class BrowserEnv:
    """One browser, one context, the task's pages; its reward state kept up to date."""

    def __init__(self, config: dict[str, Any], result_path: str, cdp_port: int = 0) -> None:
        self.config = config
        chromium = _chromium(config)
        self.site: ThreadingHTTPServer | None = None
        self.app: subprocess.Popen[bytes] | None = None
        self.result_path = result_path
        if config.get("app"):
            self._start_app()
        elif "://" not in config["start_url"]:
            self._serve_site()
        self.steps = 0
        self.answer: str | None = None
        # What the agent did, harness-agnostic, for judges: (action, url, error) per step.
        self.actions: list[dict[str, Any]] = []
        self.shots = int(config.get("keep_screenshots") or 0)
        self.shot_count = 0
        self.final: dict[str, Any] | None = None  # the reward state once the task is done
        self.last: dict[str, Any] = {"done": False, "reward": 0.0, "raw": None, "reason": None}
        self.items: list[dict[str, Any]] = []
        self._pw = sync_playwright().start()
        viewport = config.get("viewport") or [800, 600]
        self.browser = self._pw.chromium.launch(
            executable_path=chromium,
            headless=True,
            # --no-sandbox: the OpenForge sandbox is the boundary (Chromium's own needs
            # user namespaces it may not get); /dev/shm may be small or absent there.
            args=[
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                # For harnesses that drive the browser themselves (Browser-Use): its
                # DevTools port, on the sandbox's own loopback.
                *([f"--remote-debugging-port={cdp_port}"] if cdp_port else []),
            ],
        )
        self.context = self.browser.new_context(
            viewport={"width": int(viewport[0]), "height": int(viewport[1])}
        )
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        # The page the task's reward is read from, whichever tab the agent looks at; its
        # document is marked with a key no other document has (see :meth:`state`).
        self.task_page = self.page
        self.doc_key = "__openforge_task_" + secrets.token_hex(16)
        self.off_task: list[str] = []  # top documents seen that were not the task's
        self._start()

    def _serve_site(self) -> None:
        """Serve ``site_root`` (relative to the workspace) over HTTP on the loopback, the
        way a site is reached (some harnesses refuse ``file://``), and start there."""
        config = self.config
        root = os.path.abspath(str(config.get("site_root") or "."))
        page = os.path.relpath(os.path.abspath(config["start_url"]), root)
        if page.startswith(".."):
            raise SystemExit(f"start_url {config['start_url']} is outside site_root {root}")
        handler = functools.partial(_SiteHandler, directory=root)
        self.site = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.site.serve_forever, daemon=True).start()
        origin = f"http://127.0.0.1:{self.site.server_address[1]}"
        config["start_url"] = f"{origin}/{page}"
        config["site_root"] = ""  # no file:// pages: the site is served
        config["allowed_origins"] = [*config.get("allowed_origins", []), origin]

    def _start_app(self) -> None:
        """Start the bundled web apps' server (its SQLite state beside the result file) and
        open ``start_url``, a path, on it."""
        config = self.config
        d = os.path.dirname(os.path.abspath(self.result_path))
        port_file = os.path.join(d, "app.port")
        with contextlib.suppress(FileNotFoundError):
            os.remove(port_file)
        with open(os.path.join(d, "app.log"), "wb") as log:
            self.app = subprocess.Popen(
                [sys.executable, "-I", config["app_server"], "--db", config["app_db"],
                 "--port-file", port_file],
                stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if self.app.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the web apps' server did not start (see {d}/app.log)")
            time.sleep(0.05)
        with open(port_file, encoding="utf-8") as f:
            origin = f"http://127.0.0.1:{f.read().strip()}"
        config["start_url"] = origin + "/" + config["start_url"].lstrip("/")
        config["allowed_origins"] = [*config.get("allowed_origins", []), origin]

    def navigable(self, url: str) -> bool:
        """Whether the top document may be ``url``: the task's own sites (its http(s)
        origins, its ``file://`` root) and ``about:blank``. Never ``data:``, ``blob:``,
        ``javascript:`` or another ``about:`` page: a page made by the agent could hold any
        reward state it likes (or run script in the task's origin)."""
        parts = urlsplit(url)
        if url == "about:blank":
            return True
        if parts.scheme == "file":
            root = self.config.get("site_root") or ""
            return bool(root) and parts.path.startswith(root)
        if parts.scheme not in ("http", "https"):
            return False
        origin = f"{parts.scheme}://{parts.netloc}"
        return origin in self.config.get("allowed_origins", [])

    def _route(self, route: Route) -> None:
        # Requests that reach the network (or the disk) go only to the task's sites.
        if self.navigable(route.request.url):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def _start(self) -> None:
        try:
            self.page.goto(self.config["start_url"], wait_until="load")
        except PlaywrightError as exc:
            # A task's site that cannot be reached from here (offline, blocked, down): the
            # rollout is an infrastructure failure the verifier reports, never a 0.
            why = f"unreachable: {self.config['start_url']}: {_first_line(exc)}"
            self.write_error(why)
            raise SystemExit(f"start page {why}") from None
        if self.config.get("setup_js"):
            self.page.evaluate(self.config["setup_js"])
        self.page.evaluate(
            "k => Object.defineProperty(window, k, {value: true, enumerable: false})",
            self.doc_key,
        )
        self.write_result()

    # -- observations ---------------------------------------------------------------

    def observe(self, mode: str) -> dict[str, Any]:
        """The page as the agent sees it in ``mode`` (axtree, som or screenshot)."""
        self.items = self.label()
        obs: dict[str, Any] = {
            "url": self.page.url,
            "title": self.page.title(),
            "goal": self.goal(),
            "axtree": axtree_text(self.items),
            "elements": self.items,
            "steps": self.steps,
            **self.state(),
        }
        if mode == "som":
            self.page.evaluate(_MARKS_JS, self.items)
            try:
                obs["screenshot"] = base64.b64encode(self.page.screenshot()).decode()
            finally:
                self.page.evaluate(_UNMARK_JS)
        elif mode == "screenshot":
            obs["screenshot"] = base64.b64encode(self.page.screenshot()).decode()
        return obs

    def pump(self) -> None:
        """Let Playwright handle what is pending (routes, navigations) for a moment."""
        with contextlib.suppress(PlaywrightError):
            self.page.wait_for_timeout(1)

    def label(self) -> list[dict[str, Any]]:
        """Label the page's elements; a page still navigating (a form's POST and redirect)
        is waited for and labelled again."""
        for attempt in range(3):
            try:
                got: list[dict[str, Any]] = self.page.evaluate(
                    _LABEL_JS, self.config.get("skip_selector") or ""
                )
                return got
            except PlaywrightError:
                if attempt == 2:
                    raise
                with contextlib.suppress(PlaywrightError):
                    self.page.wait_for_load_state("load", timeout=10_000)
        raise AssertionError("unreachable")

    def goal(self) -> str:
        """The task's goal as the page states it (``goal_js``), else the configured one."""
        if self.config.get("goal_js"):
            try:
                got = self.page.evaluate(self.config["goal_js"])
            except PlaywrightError:
                got = None
            if isinstance(got, str) and got:
                return got
        return str(self.config.get("goal", ""))

    def state(self) -> dict[str, Any]:
        """The reward state: done, reward in [0, 1], raw reward, reason."""
        if self.final is not None:
            return self.final
        got: Any = None
        if self.config.get("reward_js"):
            try:
                got = self.task_page.evaluate(_guarded(self.config["reward_js"], self.doc_key))
            except PlaywrightError as exc:
                # The page is gone (a harness closed it): its last state read stands.
                reason = f"reward_js failed: {str(exc).splitlines()[0][:200]}"
                return {**self.last, "reason": self.last.get("reason") or reason}
        if isinstance(got, dict) and _OFF_TASK in got:
            # Another document is on top (one the agent made, a reload, another page of
            # the site): what it says is not the task's reward; the last state read stands.
            url = str(got[_OFF_TASK])[:200]
            self.note_off_task(url)
            why = f"the task page is not the top document ({url}): its reward is not read"
            return {**self.last, "reason": why}
        st = got if isinstance(got, dict) else {"done": False, "reward": 0.0}
        st = {
            "done": bool(st.get("done")),
            "reward": float(st.get("reward") or 0.0),
            "raw": st.get("raw"),
            "reason": st.get("reason"),
        }
        if st["done"]:
            self.final = st  # the episode's reward is fixed once the page says it is done
        self.last = st
        return st

    def note_off_task(self, url: str) -> None:
        """Remember a top document that was not one of the task's (for judges, monitors)."""
        if url not in self.off_task and len(self.off_task) < 20:
            self.off_task.append(url)

    def write_result(self) -> None:
        """Write the reward state (and answer, steps, actions) to the result file, atomically."""
        data = {
            **self.state(),
            "answer": self.answer,
            "steps": self.steps,
            "url": self.page.url,
            "actions": self.actions,
            "off_task": self.off_task,
        }
        write_text(self.result_path, json.dumps(data))

    def write_error(self, error: str) -> None:
        """Write a result that says the environment could not run the task."""
        write_text(self.result_path, json.dumps({"error": error, "done": False, "reward": 0.0}))

    def keep_screenshot(self) -> None:
        """Save the page as ``shots/NNNN.png`` beside the result, keeping the last
        ``keep_screenshots`` (a judge reads them)."""
        if not self.shots:
            return
        d = os.path.join(os.path.dirname(os.path.abspath(self.result_path)), "shots")
        os.makedirs(d, exist_ok=True)
        if not self.navigable(self.page.url):
            # A page the agent made is not the site's state: a judge never sees it.
            self.note_off_task(self.page.url[:200])
            return
        try:
            png = self.page.screenshot()
        except PlaywrightError:
            return  # the page is gone; the earlier screenshots stand
        self.shot_count += 1
        with open(os.path.join(d, f"{self.shot_count:04d}.png"), "wb") as f:
            f.write(png)
        for old in sorted(os.listdir(d))[: -self.shots]:
            os.remove(os.path.join(d, old))

    # -- actions ----------------------------------------------------------------------

    def _item(self, act: dict[str, Any]) -> dict[str, Any]:
        """The element ``act`` names by its ``id`` in the page's last labelling."""
        try:
            ident = int(act["id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ActionError("this action needs an element id") from exc
        if not self.items:
            self.items = self.label()
        for it in self.items:
            if it["id"] == ident:
                return it
        raise ActionError(f"no element [{ident}] on the page")

    def _element(self, act: dict[str, Any]) -> tuple[float, float]:
        x, y, w, h = self._item(act)["box"]
        return x + w / 2, y + h / 2

    def act(self, act: dict[str, Any]) -> dict[str, Any]:
        """Do one action; the new reward state (and an ``error`` the agent may read)."""
        kind = str(act.get("action", ""))
        if self.final is not None or self.answer is not None:
            return {**self.state(), "error": "the task is over"}
        self.steps += 1
        error = None
        try:
            self._do(kind, act)
        except ActionError as exc:
            error = str(exc)
        except PlaywrightError as exc:
            error = f"{kind} failed: {_first_line(exc)}"
        self.page.wait_for_timeout(int(self.config.get("settle_ms", 100)))
        with contextlib.suppress(PlaywrightError):
            self.page.wait_for_load_state("load", timeout=10_000)
        self.actions.append({"action": act, "url": self.page.url, "error": error})
        self.keep_screenshot()
        self.write_result()
        return {**self.state(), "error": error, "steps": self.steps}

    def _do(self, kind: str, act: dict[str, Any]) -> None:
        page = self.page
        if kind == "click":
            page.mouse.click(*self._element(act))
        elif kind == "type":
            x, y = self._element(act)
            page.mouse.click(x, y)
            page.keyboard.press("Control+A")
            page.keyboard.type(str(act.get("text", "")))
            if act.get("enter"):
                page.keyboard.press("Enter")
        elif kind == "select":
            self._select(act)
        elif kind == "key":
            key = str(act.get("key", ""))
            page.keyboard.press(_KEYS.get(key.lower(), key))
        elif kind == "scroll":
            dy = {"down": 300, "up": -300}.get(str(act.get("direction", "down")), 0)
            page.mouse.wheel(float(act.get("dx", 0)), float(act.get("dy", dy)))
        elif kind == "goto":
            url = str(act.get("url", ""))
            if not self.navigable(url):
                raise ActionError(f"{url[:200]} is outside this task's sites")
            page.goto(url, wait_until="load")
        elif kind == "back":
            page.go_back(wait_until="load")
        elif kind == "tab":
            pages = self.context.pages
            index = int(act.get("index", len(pages) - 1))
            if not 0 <= index < len(pages):
                raise ActionError(f"no tab {index}; there are {len(pages)}")
            self.page = pages[index]
            self.page.bring_to_front()
        elif kind == "answer":
            self.answer = str(act.get("text", ""))
        else:
            raise ActionError(
                f"unknown action {kind!r}: use click, type, select, key, scroll, goto, back, "
                "tab, answer"
            )

    def _select(self, act: dict[str, Any]) -> None:
        """Choose the option labelled ``text`` in the list element ``id`` (as a user picks
        it: the page's input and change events fire)."""
        item = self._item(act)
        options = item.get("options")
        if options is None:
            raise ActionError(f"element [{item['id']}] is not a list to select from")
        text = str(act.get("text", "")).strip()
        if text not in options:
            wanted = text.casefold()
            text = next((o for o in options if o.casefold() == wanted), text)
        if text not in options:
            raise ActionError(f"[{item['id']}] has no option {json.dumps(text)}")
        self.page.select_option(f'[data-of-id="{item["id"]}"]', label=text, timeout=5_000)

    def close(self) -> None:
        """Write the last state, then close the browser and Playwright's driver."""
        try:
            self.keep_screenshot()  # the last state, also when a harness drove it over CDP
            self.write_result()
        finally:
            try:
                self.browser.close()
            finally:
                self._pw.stop()
                if self.site is not None:
                    self.site.shutdown()
                if self.app is not None:
                    self.app.terminate()
                    self.app.wait()


def axtree_text(items: list[dict[str, Any]]) -> str:
    """The labelled elements as an indented text tree: ``[id] role "name" value=…``."""
    lines = []
    for it in items:
        line = "  " * min(int(it.get("depth", 0)), 8) + f"[{it['id']}] {it['role']}"
        if it.get("name"):
            line += f" {json.dumps(it['name'])}"
        if it.get("value"):
            line += f" value={json.dumps(it['value'])}"
        if "checked" in it:
            line += f" checked={str(it['checked']).lower()}"
        if it.get("options"):
            line += f" options={json.dumps(it['options'])}"
        lines.append(line)
    return "\n".join(lines)


class _SiteHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _handler(env: BrowserEnv) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/observation":
                mode = parse_qs(parts.query).get("mode", ["axtree"])[0]
                try:
                    self.send_json(200, env.observe(mode))
                except PlaywrightError as exc:
                    self.send_json(503, {"error": f"the page cannot be read: {_first_line(exc)}"})
            elif parts.path == "/result":
                self.send_json(200, {**env.state(), "answer": env.answer, "steps": env.steps})
            elif parts.path == "/sites":
                # For harnesses that navigate themselves (Browser-Use's allowed_domains).
                self.send_json(200, {"origins": list(env.config.get("allowed_origins", []))})
            else:
                self.send_json(404, {"error": f"no route {parts.path}"})

        def do_action(self, act: dict[str, Any]) -> dict[str, Any]:
            return env.act(act)

    return Handler


# The key a guarded reward expression answers with when the task's document is not on top.
_OFF_TASK = "__openforge_off_task__"


def _guarded(reward_js: str, doc_key: str) -> str:
    """``reward_js`` (a function or an expression) evaluated only in the document the
    environment loaded and marked with ``doc_key``, in one evaluation (no navigation can
    come between the check and the read)."""
    return (
        f"() => {{ if (window[{json.dumps(doc_key)}] !== true) "
        f"return {{{json.dumps(_OFF_TASK)}: String(location.href)}};\n"
        # A newline before the ")": a reward_js ending in a // comment must not swallow it.
        f"const r = ({reward_js}\n);\nreturn typeof r === 'function' ? r() : r; }}"
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:300]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main(argv: list[str] | None = None) -> int:
    """Start the browser, serve until SIGTERM, write the final result."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True, help="the environment's JSON config")
    ap.add_argument("--port-file", required=True, help="written with the port once ready")
    ap.add_argument("--result", required=True, help="the reward state file")
    ap.add_argument("--cdp-port-file", help="open Chromium's DevTools port; write it here")
    args = ap.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        config = json.load(f)
    t0 = time.monotonic()
    cdp_port = _free_port() if args.cdp_port_file else 0
    env = BrowserEnv(config, args.result, cdp_port)
    server = HTTPServer(("127.0.0.1", 0), _handler(env))
    # Between requests the reward state is polled, so a page driven over DevTools (not
    # through /action) still has its first "done" and reward kept.
    server.timeout = float(config.get("poll_s", 0.05 if cdp_port else 0.25))

    def between() -> None:
        # Playwright's sync API handles its events (the route that lets a request
        # through, above all) only inside a Playwright call: pump it, or a page that
        # a harness drives over DevTools stalls on its next request.
        env.pump()
        if env.final is None:
            env.state()

    if args.cdp_port_file:
        write_text(args.cdp_port_file, str(cdp_port))
    print(f"browser environment ready in {time.monotonic() - t0:.2f}s", file=sys.stderr)
    try:
        serve_until_term(server, args.port_file, between)
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
