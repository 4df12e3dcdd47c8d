"""Claw: OpenForge's minimal ReAct agent (the OpenForgeRL paper's "ReACT*").

A plain OpenAI Chat Completions tool loop with bash, read, write, edit and submit tools
and a compact system prompt that fits an 8k-token context, for small models and the
quickstart. It runs inside the sandbox as one zipapp with :mod:`openforge.guest.common`:
standard library only, so any Python 3.8+ runs it, with no OpenForge install inside the
sandbox.

Configured the way an OpenAI client is: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and
``OPENFORGE_MODEL``. Exit codes: 0 when the agent submitted or answered, 2 when it ran out
of turns, 3 when the model API refused or failed (its error is printed and transcribed).

``--resume`` continues the conversation of the transcript with the instruction as the next
user message (a multi-turn task's simulated user); ``--max-turns`` then caps the model calls
of the whole conversation, those before the resume included.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from openforge.guest.common import add_model_args, ask, function_tool, parse_agent_args, run_steps

# Bumped whenever the prompt, tools or request shape change (the fingerprint notices too).
VERSION = "1.0"

SYSTEM_PROMPT = """You are Claw, an agent that completes tasks in a Linux workspace.
Use the tools to inspect and change files. Call one tool at a time and wait for its result.
When the task is done, call submit. Paths are relative to the workspace."""

TOOLS: list[dict[str, Any]] = [
    function_tool(
        "bash",
        "Run a shell command in the workspace; returns its output.",
        {"command": {"type": "string"}},
        ["command"],
    ),
    function_tool("read", "Read a text file.", {"path": {"type": "string"}}, ["path"]),
    function_tool(
        "write",
        "Write a text file, replacing its content.",
        {"path": {"type": "string"}, "content": {"type": "string"}},
        ["path", "content"],
    ),
    function_tool(
        "edit",
        "Replace the first occurrence of old with new in a file.",
        {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
        ["path", "old", "new"],
    ),
    function_tool("submit", "Finish the task.", {"answer": {"type": "string"}}),
]

# Project instructions (task-specific tools) the workspace may hold; appended to the prompt.
AGENTS_FILE = "AGENTS.md"
MAX_AGENTS_CHARS = 4000

# Tool output is cut to this many characters so a long listing cannot overflow 8k tokens.
MAX_OBSERVATION = 2000


def _clip(text: str) -> str:
    if len(text) <= MAX_OBSERVATION:
        return text
    half = MAX_OBSERVATION // 2
    return f"{text[:half]}\n…[{len(text) - MAX_OBSERVATION} characters cut]…\n{text[-half:]}"


def _inside(workspace: Path, path: str) -> Path:
    return (workspace / path).resolve() if not os.path.isabs(path) else Path(path)


def load_task_tools(path: str) -> dict[str, dict[str, Any]]:
    """A task's own tools (``--tools``): name -> {name, description, parameters, call}.

    ``call`` is the command that runs one call, the arguments going in as JSON on stdin (the
    MCP bridge's ``call`` door); no file means no task tools.
    """
    if not path or not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return {t["name"]: t for t in json.load(f)}


def _task_tool(tool: dict[str, Any], args: dict[str, Any], timeout: float) -> str:
    done = subprocess.run(
        tool["call"], input=json.dumps(args).encode(), capture_output=True, timeout=timeout
    )
    output = (done.stdout + done.stderr).decode(errors="replace").strip()
    return _clip(output if done.returncode == 0 else f"{output}\n[exit code {done.returncode}]")


def run_tool(
    name: str,
    args: dict[str, Any],
    workspace: Path,
    timeout: float,
    task_tools: dict[str, dict[str, Any]] | None = None,
) -> str:
    """Execute one tool call and return its observation text."""
    try:
        if task_tools and name in task_tools:
            return _task_tool(task_tools[name], args, timeout)
        if name == "bash":
            done = subprocess.run(
                str(args["command"]),
                shell=True,
                cwd=workspace,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
            output = (done.stdout + done.stderr).decode(errors="replace")
            return _clip(f"{output}\n[exit code {done.returncode}]".lstrip("\n"))
        if name == "read":
            return _clip(_inside(workspace, str(args["path"])).read_text(errors="replace"))
        if name == "write":
            target = _inside(workspace, str(args["path"]))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(str(args["content"]))
            return f"wrote {len(str(args['content']))} characters to {args['path']}"
        if name == "edit":
            target = _inside(workspace, str(args["path"]))
            text = target.read_text()
            old, new = str(args["old"]), str(args["new"])
            if old not in text:
                return f"error: the text to replace was not found in {args['path']}"
            target.write_text(text.replace(old, new, 1))
            return f"edited {args['path']}"
        return f"error: unknown tool {name!r}"
    except subprocess.TimeoutExpired:
        return f"error: command timed out after {timeout:.0f} s"
    except KeyError as exc:
        return f"error: missing argument {exc.args[0]!r} for {name}"
    except OSError as exc:
        return f"error: {exc}"


def system_prompt(workspace: Path) -> str:
    """The system prompt, with the workspace's AGENTS.md (if any) appended."""
    try:
        extra = (workspace / AGENTS_FILE).read_text(errors="replace").strip()
    except OSError:
        return SYSTEM_PROMPT
    if not extra:
        return SYSTEM_PROMPT
    return f"{SYSTEM_PROMPT}\n\n{extra[:MAX_AGENTS_CHARS]}"


def run_agent(args: argparse.Namespace) -> int:
    """The ReAct loop; returns the process exit code."""
    workspace = Path(args.workspace).resolve()
    transcript = Path(args.transcript)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(workspace)}]
    if args.resume:
        try:
            messages = json.loads(transcript.read_text())["messages"]
        except (OSError, ValueError, KeyError) as exc:
            print(f"claw: cannot resume from {transcript}: {exc}", file=sys.stderr)
            return 4
        last = messages[-1] if messages else {}
        if last.get("role") == "assistant":  # it ended on submit: the call gets its result
            for call in last.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": "ok"})
    messages.append({"role": "user", "content": args.instruction})
    used = sum(1 for m in messages if m.get("role") == "assistant")
    task_tools = load_task_tools(args.tools)
    tools = TOOLS + [
        {
            "type": "function",
            "function": {k: t[k] for k in ("name", "description", "parameters")},
        }
        for t in task_tools.values()
    ]

    # Sent with every call: the fingerprint of this harness records it.
    headers = {"User-Agent": f"openforge-claw/{VERSION}"}

    def loop() -> str | None:
        for _ in range(max(0, args.max_turns - used)):
            message = ask(args, messages, tools, headers)
            calls = message.get("tool_calls") or []
            messages.append(
                {
                    "role": "assistant",
                    "content": message.get("content"),
                    "tool_calls": calls or None,
                }
            )
            if not calls:
                return "answered"
            for call in calls:
                function = call.get("function", {})
                name = function.get("name", "")
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                    if not isinstance(arguments, dict):
                        raise ValueError("arguments must be a JSON object")
                except ValueError as exc:
                    observation = f"error: invalid arguments: {exc}"
                else:
                    if name == "submit":
                        return "submitted"
                    observation = run_tool(
                        name, arguments, workspace, args.tool_timeout, task_tools
                    )
                messages.append(
                    {"role": "tool", "tool_call_id": call.get("id"), "content": observation}
                )
        return None

    return run_steps("claw", args.transcript, loop, "max_turns", messages=messages)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments (falling back to the environment) and run the agent."""
    env = os.environ
    parser = argparse.ArgumentParser(prog="claw", description="OpenForge's minimal ReAct agent")
    add_model_args(parser)
    parser.add_argument("--workspace", default=os.getcwd())
    parser.add_argument("--transcript", default=str(Path.home() / ".claw" / "transcript.json"))
    parser.add_argument("--max-turns", type=int, default=int(env.get("CLAW_MAX_TURNS", "8")))
    parser.add_argument("--max-tokens", type=int, default=int(env.get("CLAW_MAX_TOKENS", "256")))
    parser.add_argument("--tool-timeout", type=float, default=30.0)
    parser.add_argument("--tools", default="", help="a JSON file of the task's own tools")
    parser.add_argument(
        "--resume", action="store_true", help="continue the transcript's conversation"
    )
    args = parse_agent_args(parser, argv)
    if not args.instruction:
        parser.error("no instruction: pass it or set OPENFORGE_INSTRUCTION")
    return run_agent(args)


if __name__ == "__main__":
    sys.exit(main())
