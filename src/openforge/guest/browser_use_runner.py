"""Runs Browser-Use, unmodified, on one instruction inside the sandbox.

The way its users run it: an ``Agent`` with its ``ChatOpenAI`` client pointed at a base
URL and key (the rollout's gateway) and a ``Browser`` attached over DevTools to the
browser environment's Chromium (``$OPENFORGE_BROWSER_CDP_URL``). Its end-of-task judge
call is off by default (``--judge off``), or sent to a separate model (``--judge-base-url``,
``--judge-model``), never to the rollout's policy endpoint. Telemetry and cloud sync are
off. The run's history (Browser-Use's own ``AgentHistoryList``) goes to ``--transcript``.

Reward-bearing pages are read by the environment, so the agent gets no action that runs
script in them: Browser-Use's ``evaluate`` is left out through its own ``Tools(
exclude_actions=…)``, and its ``allowed_domains`` are the task's own origins (asked of the
environment's ``/sites``), so its ``navigate`` refuses everything else. (Browser-Use lets
``data:`` and ``blob:`` URLs through whatever its allow list says; the environment reads
a reward only from the document it loaded, so such a page scores nothing.)

Run with the Python of the Browser-Use install (``/opt/openforge/browser-use``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")
os.environ.setdefault("BROWSER_USE_CLOUD_SYNC", "false")
os.environ.setdefault("BROWSER_USE_LOGGING_LEVEL", "info")

from browser_use import Agent, Browser, ChatOpenAI, Tools

from openforge.guest.common import add_model_args, http_json

# Browser-Use actions that run the model's own JavaScript in the page: with them a policy
# could write the page state its reward is read from.
SCRIPT_ACTIONS = ("evaluate",)


def task_sites(browser_url: str) -> list[str]:
    """The task's origins as Browser-Use ``allowed_domains`` patterns (``http://h:p/``:
    the slash keeps port 80 from matching 8000); none when no environment answers."""
    if not browser_url:
        return []
    origins = http_json(browser_url.rstrip("/") + "/sites", timeout=30).get("origins", [])
    return [str(o).rstrip("/") + "/" for o in origins if str(o).startswith(("http:", "https:"))]


async def run(args: argparse.Namespace) -> int:
    """One Browser-Use run; 0 when it finished with ``done``, 2 otherwise."""
    llm = ChatOpenAI(
        model=args.model,
        base_url=args.base_url,
        api_key=args.api_key,
        temperature=args.temperature,
        max_retries=0,
    )
    judge = None
    if args.judge == "separate":
        judge = ChatOpenAI(
            model=args.judge_model,
            base_url=args.judge_base_url,
            api_key=args.judge_api_key,
            max_retries=0,
        )
    # keep_alive: the browser is the environment's, which reads the task's reward from it
    # after the run; Browser-Use only detaches.
    sites = task_sites(args.browser_url)
    browser = Browser(cdp_url=args.cdp_url, keep_alive=True, allowed_domains=sites or None)
    agent = Agent(
        task=args.instruction,
        llm=llm,
        browser=browser,
        tools=Tools(exclude_actions=list(SCRIPT_ACTIONS)),
        use_vision=args.vision,
        use_judge=args.judge == "separate",
        judge_llm=judge,
        max_actions_per_step=args.max_actions,
        calculate_cost=False,
        directly_open_url=False,
    )
    history = await agent.run(max_steps=args.max_steps)
    out = Path(args.transcript)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(history.model_dump_json(indent=1))
    return 0 if history.is_done() else 2


def main(argv: list[str] | None = None) -> int:
    """Parse arguments (falling back to the environment) and run."""
    env = os.environ
    ap = argparse.ArgumentParser(prog="browser-use-runner", description=__doc__)
    add_model_args(ap, request_timeout=False)
    ap.add_argument("--cdp-url", default=env.get("OPENFORGE_BROWSER_CDP_URL", ""))
    ap.add_argument("--browser-url", default=env.get("OPENFORGE_BROWSER_URL", ""))
    ap.add_argument("--judge", choices=("off", "separate"), default="off")
    ap.add_argument("--judge-base-url", default=env.get("OPENFORGE_JUDGE_BASE_URL", ""))
    ap.add_argument("--judge-api-key", default=env.get("OPENFORGE_JUDGE_API_KEY", "none"))
    ap.add_argument("--judge-model", default=env.get("OPENFORGE_JUDGE_MODEL", "judge"))
    ap.add_argument("--vision", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--max-actions", type=int, default=3)
    ap.add_argument("--transcript", default=str(Path.home() / ".browser-use-run" / "history.json"))
    args = ap.parse_args(argv)
    if not args.base_url or not args.cdp_url:
        ap.error("needs --base-url (OPENAI_BASE_URL) and --cdp-url (OPENFORGE_BROWSER_CDP_URL)")
    if args.judge == "separate" and not args.judge_base_url:
        ap.error("--judge separate needs --judge-base-url")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
