"""The in-sandbox desktop environment server: an X display driven by PyAutoGUI, over HTTP.

Shipped into the sandbox as a zipapp and run there (with a Python that has ``pyautogui``) after the
launch has started Xvfb and a window manager on ``$DISPLAY``. It first runs the task's
OSWorld-style ``config`` steps (``launch``, ``execute``/``command``, ``sleep``), then serves
on 127.0.0.1, one request at a time:

    GET  /observation                 {"screenshot": base64 PNG, "size": [w, h]}
    POST /action  {"action_space": "pyautogui", "code": "pyautogui.click(10, 20)"}
                  {"action_space": "computer_13", "action_type": "CLICK", "x": 10, "y": 20}
                  {"action_space": "claude", "action": "left_click", "coordinate": [10, 20]}
                  {"action_space": "openai", "type": "click", "button": "left", "x": 10, "y": 20}
                  "WAIT" / "DONE" / "FAIL" as the code (or action_type) end or pause

OSWorld's two action spaces: ``pyautogui`` runs the code with ``pyautogui`` (and ``time``)
in scope; ``computer_13`` is its 13 typed actions plus WAIT, FAIL and DONE. The agent's
DONE or FAIL, and the step count, go to the result file the task's evaluator reads.

The vendors' computer-use actions run as they arrive in a tool call, so an agent built on
them forwards its calls unchanged: ``claude`` takes the input of Anthropic's computer
tool (``computer_20241022`` … ``computer_20251124``: ``action`` plus ``coordinate``,
``text``, ``scroll_direction``, ``scroll_amount``, ``duration``, ``start_coordinate``,
``region``; a toolset member's input with its name as ``action``), keys in xdotool's
syntax (``ctrl+s``, ``Return``); ``openai`` takes a Responses ``computer_call`` action
(click, double_click, drag, keypress, move, screenshot, scroll, type, wait). An action
that observes answers with ``image`` (base64 PNG: ``screenshot``, ``zoom``) or ``output``
(``cursor_position``).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import subprocess
import sys
import time
from http.server import HTTPServer
from typing import Any

import pyautogui
from PIL import ImageGrab
from Xlib import X
from Xlib import display as xdisplay

from openforge.guest.common import JsonHandler, serve_until_term, write_text

pyautogui.FAILSAFE = False  # a corner of a virtual screen is not an emergency
pyautogui.PAUSE = 0.05


# How long a ``launch`` step waits for its app's window to appear and take the focus. A
# launch that keeps running without a window (a daemon) costs this much; one that opens a
# window is waited for only until it is ready, so a loaded machine no longer types into a
# window not yet there; one that exits stops the wait.
LAUNCH_WINDOW_TIMEOUT_S = 20.0


class ActionError(Exception):
    """An action that cannot be done: told to the agent."""


class Windows:
    """The window manager's view of the display (EWMH root properties, set by openbox)."""

    def __init__(self) -> None:
        self.display = xdisplay.Display()
        self.root = self.display.screen().root
        self._clients = self.display.intern_atom("_NET_CLIENT_LIST")
        self._active = self.display.intern_atom("_NET_ACTIVE_WINDOW")
        self._wm_check = self.display.intern_atom("_NET_SUPPORTING_WM_CHECK")

    def _ids(self, atom: int) -> list[int]:
        prop = self.root.get_full_property(atom, X.AnyPropertyType)
        return [int(v) for v in prop.value] if prop is not None else []

    def clients(self) -> set[int]:
        """The managed top-level windows."""
        return set(self._ids(self._clients))

    def active(self) -> int:
        """The focused window (0 when none)."""
        ids = self._ids(self._active)
        return ids[0] if ids else 0

    def wait_manager(self, timeout: float) -> bool:
        """Wait until the window manager runs (it was started just before this server)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ids(self._wm_check):
                return True
            time.sleep(0.05)
        return False

    def wait_new_active(
        self, before: set[int], proc: subprocess.Popen[bytes], timeout: float
    ) -> bool:
        """Wait until a window not in ``before`` is managed and focused; False on timeout,
        or when ``proc`` ended without one (a command that opens no window, or hands its
        window to another process: the task's own ``sleep`` then covers it, as in OSWorld)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            new = self.clients() - before
            if new and self.active() in new:
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def close(self) -> None:
        """Let go of the X connection."""
        self.display.close()


def run_config(steps: list[dict[str, Any]], procs: list[subprocess.Popen[bytes]]) -> None:
    """Run OSWorld ``config`` steps: launch (in the background), execute, sleep.

    OSWorld's own tasks follow a ``launch`` with a fixed ``sleep``; on a loaded machine the
    app is not up by then, so each launch also waits (bounded) for its window to be focused.
    """
    windows = Windows() if any(s.get("type") == "launch" for s in steps) else None
    try:
        if windows is not None:
            # An app mapped before openbox manages the screen is not given the focus.
            windows.wait_manager(LAUNCH_WINDOW_TIMEOUT_S)
        _run_steps(steps, procs, windows)
    finally:
        if windows is not None:
            windows.close()


def _run_steps(
    steps: list[dict[str, Any]], procs: list[subprocess.Popen[bytes]], windows: Windows | None
) -> None:
    for step in steps:
        kind, params = step.get("type"), step.get("parameters") or {}
        command: str | list[str] = params.get("command") or ""
        shell = bool(params.get("shell")) or isinstance(command, str)
        if kind == "launch":
            assert windows is not None
            before = windows.clients()
            procs.append(
                subprocess.Popen(
                    command,
                    shell=shell,
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            windows.wait_new_active(before, procs[-1], LAUNCH_WINDOW_TIMEOUT_S)
        elif kind in ("execute", "command"):
            subprocess.run(
                command,
                shell=shell,
                timeout=120,
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        elif kind == "sleep":
            time.sleep(float(params.get("seconds", 1)))
        else:
            raise SystemExit(f"unsupported config step type {kind!r}")


def computer_13(act: dict[str, Any]) -> None:
    """Do one of OSWorld's typed ``computer_13`` actions with PyAutoGUI."""
    kind = str(act.get("action_type", "")).upper()
    p = act.get("parameters") or act
    xy = (p["x"], p["y"]) if "x" in p and "y" in p else ()
    if kind == "MOVE_TO":
        pyautogui.moveTo(*xy)
    elif kind == "CLICK":
        pyautogui.click(*xy, button=p.get("button", "left"), clicks=int(p.get("num_clicks", 1)))
    elif kind == "MOUSE_DOWN":
        pyautogui.mouseDown(button=p.get("button", "left"))
    elif kind == "MOUSE_UP":
        pyautogui.mouseUp(button=p.get("button", "left"))
    elif kind == "RIGHT_CLICK":
        pyautogui.rightClick(*xy)
    elif kind == "DOUBLE_CLICK":
        pyautogui.doubleClick(*xy)
    elif kind == "DRAG_TO":
        pyautogui.dragTo(*xy, button="left")
    elif kind == "SCROLL":
        pyautogui.scroll(int(p.get("dy", 0)))
        if p.get("dx"):
            pyautogui.hscroll(int(p["dx"]))
    elif kind == "TYPING":
        pyautogui.typewrite(str(p.get("text", "")))
    elif kind == "PRESS":
        pyautogui.press(str(p.get("key", "")))
    elif kind == "KEY_DOWN":
        pyautogui.keyDown(str(p.get("key", "")))
    elif kind == "KEY_UP":
        pyautogui.keyUp(str(p.get("key", "")))
    elif kind == "HOTKEY":
        pyautogui.hotkey(*[str(k) for k in p.get("keys", [])])
    else:
        raise ActionError(f"unknown computer_13 action {kind!r}")


def _keys(text: str) -> list[str]:
    """Key combinations in xdotool's syntax (``ctrl+s``, ``ctrl+a Delete``) as its
    arguments: one per space-separated combination, ``+`` kept."""
    keys = text.split()
    if not keys:
        raise ActionError("`text` names no key")
    return keys


def _xdotool(*args: str) -> None:
    # xdotool reads Anthropic's key syntax as written (keysyms: Return, KP_0, alt+Tab).
    try:
        done = subprocess.run(["xdotool", *args], capture_output=True, timeout=120)
    except FileNotFoundError:
        raise ActionError("xdotool is not installed in this desktop") from None
    if done.returncode != 0:
        raise ActionError(done.stderr.decode(errors="replace").strip() or "xdotool failed")


def _point(value: Any, name: str = "coordinate") -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and v >= 0 for v in value)
    ):
        raise ActionError(f"`{name}` must be [x, y], two non-negative integers")
    return value[0], value[1]


def _png(image: Any) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _grab() -> Any:
    return ImageGrab.grab(xdisplay=os.environ.get("DISPLAY"))


def _held(text: Any) -> list[str]:
    """Modifier keys (PyAutoGUI's names) to hold down during a click or scroll
    (``text``: ``ctrl+shift``)."""
    if not isinstance(text, str):
        return []
    names = {"super": "win", "cmd": "win", "meta": "win", "control": "ctrl"}
    return [names.get(k.lower(), k.lower()) for k in text.split("+") if k]


def claude_action(act: dict[str, Any]) -> dict[str, Any]:
    """Do one action of Anthropic's computer tool; what it observed, if anything."""
    kind = act.get("action")
    at = _point(act["coordinate"]) if act.get("coordinate") is not None else None
    if kind in ("key", "type", "hold_key") and not isinstance(act.get("text"), str):
        raise ActionError(f"`text` is required for {kind}")
    if kind == "key":
        for _ in range(int(act.get("repeat") or 1)):
            _xdotool("key", "--", *_keys(act["text"]))
    elif kind == "type":
        _xdotool("type", "--delay", "12", "--", act["text"])
    elif kind == "hold_key":
        keys = _keys(act["text"])
        _xdotool("keydown", *keys)
        time.sleep(min(float(act.get("duration") or 0), 100.0))
        _xdotool("keyup", *reversed(keys))
    elif kind in ("wait", "screenshot"):
        if kind == "wait":
            time.sleep(min(float(act.get("duration") or 0), 100.0))
        return {"image": _png(_grab())}
    elif kind == "cursor_position":
        x, y = pyautogui.position()
        return {"output": f"X={x},Y={y}"}
    elif kind == "mouse_move":
        pyautogui.moveTo(*_point(act.get("coordinate")))
    elif kind in ("left_mouse_down", "left_mouse_up"):
        (pyautogui.mouseDown if kind == "left_mouse_down" else pyautogui.mouseUp)(*(at or ()))
    elif kind == "left_click_drag":
        if act.get("start_coordinate") is not None:  # 2025 versions; before: from here
            pyautogui.moveTo(*_point(act["start_coordinate"], "start_coordinate"))
        pyautogui.dragTo(*_point(act.get("coordinate")), duration=0.2, button="left")
    elif kind in ("left_click", "right_click", "middle_click", "double_click", "triple_click"):
        button = {"right_click": "right", "middle_click": "middle"}.get(kind, "left")
        clicks = {"double_click": 2, "triple_click": 3}.get(kind, 1)
        held = _held(act.get("text") or act.get("key"))
        for k in held:
            pyautogui.keyDown(k)
        pyautogui.click(*(at or ()), clicks=clicks, interval=0.05, button=button)
        for k in reversed(held):
            pyautogui.keyUp(k)
    elif kind == "scroll":
        direction, amount = act.get("scroll_direction"), act.get("scroll_amount")
        if direction not in ("up", "down", "left", "right") or not isinstance(amount, int):
            raise ActionError(
                "scroll needs `scroll_direction` (up/down/left/right) and `scroll_amount`"
            )
        if at is not None:
            pyautogui.moveTo(*at)
        held = _held(act.get("text"))
        for k in held:
            pyautogui.keyDown(k)
        clicks = amount if direction in ("up", "left") else -amount
        (pyautogui.scroll if direction in ("up", "down") else pyautogui.hscroll)(clicks)
        for k in reversed(held):
            pyautogui.keyUp(k)
    elif kind == "zoom":
        region = act.get("region")
        if not (
            isinstance(region, list)
            and len(region) == 4
            and all(isinstance(v, int) for v in region)
        ):
            raise ActionError("`region` must be [x0, y0, x1, y1]")
        x0, y0, x1, y1 = region
        if x1 <= x0 or y1 <= y0:
            raise ActionError("`region` must have x1 > x0 and y1 > y0")
        shot = _grab()
        crop = shot.crop((x0, y0, x1, y1))
        scale = min(shot.size[0] / crop.size[0], shot.size[1] / crop.size[1])
        return {
            "image": _png(crop.resize((round(crop.size[0] * scale), round(crop.size[1] * scale))))
        }
    else:
        raise ActionError(f"unknown computer action {kind!r}")
    return {}


# OpenAI's key names (``CTRL``, ``ENTER``, ``ARROWLEFT``) as PyAutoGUI's.
_OPENAI_KEYS = {
    "arrowleft": "left", "arrowright": "right", "arrowup": "up", "arrowdown": "down",
    "cmd": "win", "meta": "win", "super": "win", "option": "alt", "return": "enter",
    "escape": "esc", "pagedown": "pagedown", "pageup": "pageup",
}  # fmt: skip
# One wheel notch per this many pixels of an OpenAI scroll distance.
_NOTCH_PX = 100


def openai_action(act: dict[str, Any]) -> dict[str, Any]:
    """Do one action of OpenAI's computer tool (a ``computer_call`` action object)."""
    kind = act.get("type")
    keys = [_OPENAI_KEYS.get(str(k).lower(), str(k).lower()) for k in act.get("keys") or []]
    xy = (int(act["x"]), int(act["y"])) if "x" in act and "y" in act else ()
    if kind == "screenshot":
        return {"image": _png(_grab())}
    if kind == "wait":
        time.sleep(1.0)
        return {"image": _png(_grab())}
    if kind == "keypress":
        pyautogui.hotkey(*keys)
        return {}
    if kind == "type":
        _xdotool("type", "--delay", "12", "--", str(act.get("text", "")))
        return {}
    for k in keys:  # keys held during a pointer action
        pyautogui.keyDown(k)
    try:
        if kind == "click":
            button = {"wheel": "middle"}.get(
                str(act.get("button", "left")), str(act.get("button", "left"))
            )
            if button not in ("left", "right", "middle"):
                raise ActionError(f"button {button!r} cannot be pressed on this desktop")
            pyautogui.click(*xy, button=button)
        elif kind == "double_click":
            pyautogui.doubleClick(*xy)
        elif kind == "move":
            pyautogui.moveTo(*xy)
        elif kind == "drag":
            path = act.get("path") or []
            if len(path) < 2:
                raise ActionError("drag needs a `path` of at least two points")
            pyautogui.moveTo(int(path[0]["x"]), int(path[0]["y"]))
            pyautogui.mouseDown(button="left")
            for p in path[1:]:
                pyautogui.moveTo(int(p["x"]), int(p["y"]), duration=0.1)
            pyautogui.mouseUp(button="left")
        elif kind == "scroll":
            if xy:
                pyautogui.moveTo(*xy)
            dy, dx = int(act.get("scroll_y", 0)), int(act.get("scroll_x", 0))
            if dy:  # positive scroll_y scrolls down: the wheel turns towards the user
                pyautogui.scroll(-(abs(dy) // _NOTCH_PX or 1) * (1 if dy > 0 else -1))
            if dx:
                pyautogui.hscroll((abs(dx) // _NOTCH_PX or 1) * (1 if dx > 0 else -1))
        else:
            raise ActionError(f"unknown computer action {kind!r}")
    finally:
        for k in reversed(keys):
            pyautogui.keyUp(k)
    return {}


class Desktop:
    """The display's state as the agent and the evaluator see it."""

    def __init__(self, result_path: str) -> None:
        self.result_path = result_path
        self.steps = 0
        self.status = "running"  # running · done · fail
        self.write_result()

    def write_result(self) -> None:
        """The agent's status and step count, for the evaluator (atomically)."""
        write_text(self.result_path, json.dumps({"status": self.status, "steps": self.steps}))

    def observe(self) -> dict[str, Any]:
        """A screenshot of the whole display."""
        # Pillow reads the X display over XCB (pyscreeze wants gnome-screenshot here).
        shot = ImageGrab.grab(xdisplay=os.environ.get("DISPLAY"))
        buf = io.BytesIO()
        shot.save(buf, format="PNG")
        return {
            "screenshot": base64.b64encode(buf.getvalue()).decode(),
            "size": list(shot.size),
            "status": self.status,
            "steps": self.steps,
        }

    def act(self, act: dict[str, Any]) -> dict[str, Any]:
        """Do one action in either action space; the new status (and an ``error``)."""
        if self.status != "running":
            return {"status": self.status, "error": "the task is over"}
        self.steps += 1
        error = None
        seen: dict[str, Any] = {}
        space = act.get("action_space", "pyautogui")
        marker = str(act.get("code") if space == "pyautogui" else act.get("action_type", ""))
        try:
            if marker.strip().upper() in ("DONE", "FAIL", "WAIT"):
                word = marker.strip().upper()
                if word == "WAIT":
                    time.sleep(1.0)
                else:
                    self.status = word.lower()
            elif space == "pyautogui":
                exec(compile(marker, "<action>", "exec"), {"pyautogui": pyautogui, "time": time})
            elif space == "computer_13":
                computer_13(act)
            elif space == "claude":
                seen = claude_action(act)
            elif space == "openai":
                seen = openai_action(act)
            else:
                raise ActionError(f"unknown action space {space!r}")
        except ActionError as exc:
            error = str(exc)
        except Exception as exc:  # the agent's code: any error is its observation
            error = f"{type(exc).__name__}: {exc}"
        self.write_result()
        return {"status": self.status, "steps": self.steps, "error": error, **seen}


def _handler(desk: Desktop) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/observation":
                self.send_json(200, desk.observe())
            else:
                self.send_json(404, {"error": f"no route {self.path}"})

        def do_action(self, act: dict[str, Any]) -> dict[str, Any]:
            return desk.act(act)

    return Handler


def main(argv: list[str] | None = None) -> int:
    """Run the config steps, then serve until SIGTERM."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True, help="the environment's JSON config")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--result", required=True)
    args = ap.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        config = json.load(f)
    procs: list[subprocess.Popen[bytes]] = []
    run_config(config.get("steps") or [], procs)
    desk = Desktop(args.result)
    try:
        serve_until_term(HTTPServer(("127.0.0.1", 0), _handler(desk)), args.port_file)
    finally:
        desk.write_result()
        for proc in procs:
            proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
