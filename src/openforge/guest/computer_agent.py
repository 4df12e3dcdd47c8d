"""OpenForge's built-in computer-use agent, run inside the sandbox.

It works on the desktop environment (``$OPENFORGE_DESKTOP_URL``: Xvfb, a window manager,
PyAutoGUI) through OpenAI Chat Completions tool calls (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``OPENFORGE_MODEL``), with the three tools the paper's computer-use
harness has:

* ``computer``: PyAutoGUI code run on the display (OSWorld's ``pyautogui`` action space),
  or ``DONE`` / ``FAIL`` / ``WAIT``; answered with a fresh screenshot;
* ``bash``: a shell command in the sandbox (its output, cut to 8 KB);
* ``str_replace_editor``: ``view`` / ``create`` / ``str_replace`` / ``insert`` on a file.

The conversation grows call by call (the model sees its own earlier calls and their
results); after each step a user turn carries the new screenshot, and only the last
``--keep-screenshots`` screenshots stay in the history (older turns keep only their text,
as computer-use harnesses do to bound the prompt). Standard library and
:mod:`openforge.guest.common` only. Exit codes: 0 the agent said DONE or FAIL, 2 out of steps,
3 the model API failed, 4 the desktop is missing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from openforge.guest.common import (
    add_agent_args,
    ask,
    environment,
    function_tool,
    parse_agent_args,
    run_steps,
)

VERSION = "1.0"

SYSTEM_PROMPT = """You are a computer-use agent on a Linux desktop (1280x800 screen). Do \
the user's task. After each step you get a screenshot. Tools: `computer` runs PyAutoGUI \
code (e.g. pyautogui.click(100, 200); pyautogui.typewrite('text'); \
pyautogui.hotkey('ctrl', 's')), or the single word DONE when the task is complete, FAIL \
when it cannot be done, WAIT to wait; `bash` runs a shell command; `str_replace_editor` \
views and edits files. Call one tool per step."""

TOOLS: list[dict[str, Any]] = [
    function_tool(
        "computer",
        "Run PyAutoGUI code on the screen, or DONE / FAIL / WAIT.",
        {"code": {"type": "string", "description": "PyAutoGUI code"}},
        ["code"],
    ),
    function_tool(
        "bash",
        "Run a bash command in the sandbox; returns its output.",
        {"command": {"type": "string"}},
        ["command"],
    ),
    function_tool(
        "str_replace_editor",
        "View, create or edit a file: view, create, str_replace, insert.",
        {
            "command": {"enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string"},
            "file_text": {"type": "string"},
            "old_str": {"type": "string"},
            "new_str": {"type": "string"},
            "insert_line": {"type": "integer"},
        },
        ["command", "path"],
    ),
]
MAX_OUTPUT = 8000


def _desktop(args: argparse.Namespace, path: str, body: dict[str, Any] | None = None) -> Any:
    return environment(args.desktop_url, path, body, "desktop environment")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + "\n…(output cut)"


def run_bash(command: str, timeout: float = 120.0) -> str:
    """The command's exit status and combined output."""
    try:
        done = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"(timed out after {timeout:g}s)"
    out = (done.stdout + done.stderr).decode(errors="replace")
    return _cut(f"exit status {done.returncode}\n{out}")


def edit_file(args: dict[str, Any]) -> str:
    """The file editor: view, create, str_replace (exactly one match) or insert after a line."""
    command, path = str(args.get("command", "")), Path(str(args.get("path", "")))
    if not str(path) or not path.is_absolute():
        return "error: path must be an absolute path"
    try:
        if command == "view":
            if path.is_dir():
                return _cut("\n".join(sorted(p.name for p in path.iterdir())))
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            return _cut("\n".join(f"{i + 1:6}\t{line}" for i, line in enumerate(lines)))
        if command == "create":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(args.get("file_text", "")), encoding="utf-8")
            return f"created {path}"
        text = path.read_text(encoding="utf-8")
        if command == "str_replace":
            old = str(args.get("old_str", ""))
            count = text.count(old) if old else 0
            if count != 1:
                return f"error: old_str occurs {count} times in {path}; it must occur once"
            path.write_text(text.replace(old, str(args.get("new_str", ""))), encoding="utf-8")
            return f"edited {path}"
        if command == "insert":
            lines = text.splitlines(keepends=True)
            at = int(args.get("insert_line", len(lines)))
            new = str(args.get("new_str", ""))
            lines.insert(max(0, min(at, len(lines))), new if new.endswith("\n") else new + "\n")
            path.write_text("".join(lines), encoding="utf-8")
            return f"inserted into {path}"
    except (OSError, ValueError) as exc:
        return f"error: {exc}"
    return f"error: unknown command {command!r}: use view, create, str_replace or insert"


def _screen_turn(obs: dict[str, Any], note: str) -> dict[str, Any]:
    image = {"url": "data:image/png;base64," + obs["screenshot"]}
    return {
        "role": "user",
        "content": [{"type": "text", "text": note}, {"type": "image_url", "image_url": image}],
    }


def _prune(messages: list[dict[str, Any]], keep: int) -> None:
    """Drop all but the last ``keep`` screenshots (their turns keep only their text)."""
    shown = [m for m in messages if isinstance(m["content"], list) and len(m["content"]) == 2]
    for m in shown[: max(0, len(shown) - keep)]:
        m["content"] = m["content"][:1]


def _do(args: argparse.Namespace, name: str, params: dict[str, Any]) -> tuple[str, str | None]:
    """Run one tool call; (its result text, the status DONE/FAIL set, if any)."""
    if name == "computer":
        res = _desktop(args, "/action", {"action_space": "pyautogui", "code": params.get("code")})
        status = res.get("status")
        text = f"status: {status}" + (f"; error: {res['error']}" if res.get("error") else "")
        return text, status if status in ("done", "fail") else None
    if name == "bash":
        return run_bash(str(params.get("command", ""))), None
    if name == "str_replace_editor":
        return edit_file(params), None
    return f"error: unknown tool {name!r}", None


def run_agent(args: argparse.Namespace) -> int:
    """The screenshot → tool call → result loop; returns the process exit code."""
    steps: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": args.instruction},
    ]

    def loop() -> str | None:
        messages.append(_screen_turn(_desktop(args, "/observation"), "The screen now."))
        for n in range(1, args.max_steps + 1):
            _prune(messages, args.keep_screenshots)
            reply = ask(args, messages, TOOLS)
            calls = reply.get("tool_calls") or []
            messages.append(
                {"role": "assistant", "content": reply.get("content"), "tool_calls": calls}
                if calls
                else {"role": "assistant", "content": reply.get("content") or ""}
            )
            if not calls:
                messages.append({"role": "user", "content": "Call one of the tools."})
                steps.append({"reply": reply.get("content"), "tool": None})
                continue
            status = None
            for call in calls:
                fn = call.get("function") or {}
                try:
                    params = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    params = None
                if not isinstance(params, dict):
                    result, got = "error: the arguments are not a JSON object", None
                else:
                    result, got = _do(args, str(fn.get("name")), params)
                status = status or got
                steps.append({"tool": fn.get("name"), "arguments": params, "result": result})
                messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": result})
            if status is not None:
                return status
            obs = _desktop(args, "/observation")
            messages.append(_screen_turn(obs, f"The screen after step {n}."))
        return None

    return run_steps("computer agent", args.transcript, loop, steps=steps)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments (falling back to the environment) and run the agent."""
    ap = argparse.ArgumentParser(prog="computer-agent", description=__doc__)
    add_agent_args(ap, "desktop", ".computer-agent/run.json", max_steps=15, max_tokens=256)
    ap.add_argument("--keep-screenshots", type=int, default=3)
    return run_agent(parse_agent_args(ap, argv, "desktop"))


if __name__ == "__main__":
    sys.exit(main())
