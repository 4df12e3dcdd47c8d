"""OpenForge's built-in browser agent (WebVoyager-style), run inside the sandbox.

Each step it reads the page from the browser environment (``$OPENFORGE_BROWSER_URL``),
asks the model for one action through OpenAI Chat Completions (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``OPENFORGE_MODEL``) and does it. Two observation modes:

* ``axtree``: text only, the page's labelled elements as an indented tree ``[id] role
  "name"``: small enough for SmolLM2-135M to learn on a CPU;
* ``som``: a set-of-marks screenshot (numbered boxes over the elements, as an image part)
  plus the same element list.

Every call is one system prompt and one user turn (goal, the actions so far, the page
now), so prompts stay short whatever the episode's length. The model answers with a line
``Action: <command>``::

    Click [id] · Type [id]; text · Select [id]; option · Key; Enter · Scroll; down
    · Back · Answer; text

exactly the actions its prompt lists: a verb the prompt does not teach (the server's
``goto``, ``tab``) is not understood, so a policy cannot find a hidden action the task
never offered.

Standard library and :mod:`openforge.guest.common` only (shipped with it as one zipapp).
Exit codes: 0 when the task ended (the page said so, or the agent answered), 2 out of steps,
3 the model API failed, 4 the browser environment is missing.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from openforge.guest.common import add_agent_args, ask, environment, parse_agent_args, run_steps

# Bumped whenever the prompt or request shape changes (the fingerprint notices too).
VERSION = "1.2"

SYSTEM_PROMPT = """You are a web agent. You see a web page as a list of elements, each with
a number in brackets. Do the task one action at a time. Reply with one line:
Action: Click [N]
Action: Type [N]; text
Action: Select [N]; option   (for a list with options)
Action: Key; Enter
Action: Scroll; down
Action: Back
Action: Answer; text   (when the task asks a question, or is done)"""

MAX_PAGE_CHARS = 6000
# The verbs of SYSTEM_PROMPT, and no others (tests/environments check the two agree).
VERBS = ("click", "type", "select", "key", "scroll", "back", "answer")
_ACTION = re.compile(
    rf"({'|'.join(VERBS)})\b\s*(?:\[(\d+)\])?\s*;?\s*(.*)",
    re.IGNORECASE,
)


def parse_action(reply: str) -> dict[str, Any] | None:
    """The action in ``reply`` (its last ``Action:`` line, else its first line), or None."""
    lines = [ln.strip() for ln in reply.strip().splitlines() if ln.strip()]
    tagged = [ln.split(":", 1)[1] for ln in lines if ln.lower().startswith("action:")]
    candidates = tagged[-1:] or lines[:1]
    for text in candidates:
        m = _ACTION.match(text.strip().strip("`"))
        if not m:
            continue
        verb, ident, rest = m.group(1).lower(), m.group(2), m.group(3).strip()
        rest = rest[1:-1] if len(rest) >= 2 and rest[0] == rest[-1] == '"' else rest
        act: dict[str, Any] = {"action": verb}
        if ident is not None:
            act["id"] = int(ident)
        if verb in ("type", "select"):
            act["text"] = rest
        elif verb == "key":
            act["key"] = rest or "Enter"
        elif verb == "scroll":
            act["direction"] = (rest or "down").lower()
        elif verb == "answer":
            act["text"] = rest
        return act
    return None


def _env(args: argparse.Namespace, path: str, body: dict[str, Any] | None = None) -> Any:
    return environment(args.browser_url, path, body, "browser environment")


def user_turn(
    goal: str, history: list[str], obs: dict[str, Any], mode: str
) -> str | list[dict[str, Any]]:
    """The step's user message: goal, the actions so far, the page (and its screenshot)."""
    page = obs.get("axtree", "")
    if len(page) > MAX_PAGE_CHARS:
        page = page[:MAX_PAGE_CHARS] + "\n…(more elements cut)"
    done = "\n".join(f"{i + 1}. {h}" for i, h in enumerate(history)) or "(none)"
    text = f"Task: {goal}\nPrevious actions:\n{done}\nPage {obs.get('url', '')}:\n{page}"
    if mode != "som" or not obs.get("screenshot"):
        return text
    image = {"url": "data:image/png;base64," + obs["screenshot"]}
    return [{"type": "text", "text": text}, {"type": "image_url", "image_url": image}]


def run_agent(args: argparse.Namespace) -> int:
    """The observe → ask → act loop; returns the process exit code."""
    steps: list[dict[str, Any]] = []
    history: list[str] = []

    def loop() -> str | None:
        for _ in range(args.max_steps):
            obs = _env(args, f"/observation?mode={args.mode}")
            if obs.get("done"):
                return "done"
            goal = obs.get("goal") or args.instruction
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user_turn(goal, history, obs, args.mode)},
            ]
            reply = str(ask(args, messages).get("content") or "")
            act = parse_action(reply)
            step: dict[str, Any] = {"url": obs.get("url"), "reply": reply, "action": act}
            steps.append(step)
            if act is None:
                history.append(f"(no action understood in: {reply.strip()[:80]!r})")
                continue
            result = _env(args, "/action", act)
            step["result"] = result
            note = f" -> error: {result['error']}" if result.get("error") else ""
            history.append(reply.strip().splitlines()[-1][:120] + note)
            if result.get("done") or act["action"] == "answer":
                return "done"
        return None

    return run_steps("browser agent", args.transcript, loop, mode=args.mode, steps=steps)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments (falling back to the environment) and run the agent."""
    ap = argparse.ArgumentParser(prog="browser-agent", description=__doc__)
    add_agent_args(ap, "browser", ".browser-agent/run.json", max_steps=8, max_tokens=64)
    ap.add_argument("--mode", choices=("axtree", "som"), default="axtree")
    return run_agent(parse_agent_args(ap, argv, "browser"))


if __name__ == "__main__":
    sys.exit(main())
