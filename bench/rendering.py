"""Prompt rendering per call: incremental (cached) vs plain full re-tokenization.

Builds a Claude Code rollout from the recorded first request (its system blocks, 24 tools,
first messages) and extends it turn by turn with sampled-looking replies and tool results.
For each call it measures, in the same run:

- ``full``: render the whole prompt text and tokenize it in one go (what a gateway
  without caches does on every call; the baseline);
- ``cold``: the renderer with empty caches (a new process's first call);
- ``new rollout``: the renderer on a rollout's first call, system + tools cached;
- ``cached``: the renderer on each later call, with the rollout's history.

Run: ``.venv/bin/python bench/rendering.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from openforge.conversation import ContentPart, Conversation, Message, TextPart, ToolCall, ToolSpec
from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.rendering import Renderer, load_tokenizer

# Recorded by Claude Code: the shared fixtures beside the checkout, else the tests' copy.
_NAME = "claude-code-2.1.197.messages.first-call.json"
_CHECKOUT = Path(__file__).resolve().parents[1]
FIXTURE = next(
    (
        p
        for p in (
            _CHECKOUT.parent / "shared" / "fixtures" / "harness-requests" / _NAME,
            _CHECKOUT / "tests" / "dialects" / "fixtures" / _NAME,
        )
        if p.is_file()
    ),
    _CHECKOUT / "tests" / "dialects" / "fixtures" / _NAME,
)
MODEL = models_dir() / DEFAULT_MODEL


def _parts(content: str | list[dict[str, Any]]) -> list[ContentPart]:
    if isinstance(content, str):
        return [TextPart(content)]
    return [TextPart(b["text"]) for b in content if b.get("type") == "text"]


def first_call() -> Conversation:
    """The recorded Claude Code request as a canonical conversation."""
    body = json.loads(FIXTURE.read_text())
    system = Message("system", _parts(body["system"]))
    msgs = [system] + [Message(m["role"], _parts(m["content"])) for m in body["messages"]]
    tools = [
        ToolSpec(t["name"], t.get("description", ""), t["input_schema"]) for t in body["tools"]
    ]
    return Conversation(messages=msgs, tools=tools)


def _tool_output(turn: int) -> str:
    lines = [
        f"src/module_{turn}_{i}.py:{i * 7}: def handler_{i}(request): return {i}" for i in range(25)
    ]
    return "\n".join(lines)


def _reply(turn: int) -> Message:
    cmd = json.dumps(
        {"command": f"grep -rn handler src/ | head -n {turn + 20}", "description": "Search"}
    )
    return Message(
        "assistant",
        [TextPart(f"Looking at the handlers, step {turn}.")],
        tool_calls=[ToolCall(f"toolu_{turn}", "Bash", cmd)],
        reasoning=f"I should search the source tree for handlers (step {turn}).",
    )


def run(turns: int, rollouts: int) -> None:
    tok = load_tokenizer(MODEL)
    warm = Renderer(tok)
    first = first_call()
    full_text = tok._template.decode(warm.render(first).ids, skip_special_tokens=False)
    print(f"first call: {len(full_text) / 1000:.1f} KB of prompt text, {len(first.tools)} tools")
    rows: dict[str, list[float]] = {"full": [], "cold": [], "new rollout": [], "cached": []}
    tokens: list[int] = []
    fresh: list[int] = []
    for _ in range(rollouts):
        conv = first_call()
        history = warm.new_history()
        for turn in range(turns):
            cold = Renderer(tok)
            t0 = time.perf_counter()
            cold.render(conv)
            t1 = time.perf_counter()
            prompt = warm.render(conv, history)
            t2 = time.perf_counter()
            rows["cold"].append((t1 - t0) * 1e3)
            rows["cached" if turn else "new rollout"].append((t2 - t1) * 1e3)
            if turn:
                fresh.append(len(prompt.ids) - prompt.reused_tokens)
                assert not prompt.fork, prompt.fork_reason
            text = tok._template.decode(prompt.ids, skip_special_tokens=False)
            t3 = time.perf_counter()
            tok.encode_template(text)
            rows["full"].append((time.perf_counter() - t3) * 1e3)
            tokens.append(len(prompt.ids))
            reply = _reply(turn)
            out = warm.encode_reply(reply.text, reply.reasoning, reply.tool_calls)
            parsed = warm.parse(out)
            history.record(
                prompt,
                out,
                Message(
                    "assistant",
                    [TextPart(parsed.text)],
                    parsed.tool_calls,
                    reasoning=parsed.reasoning,
                ),
            )
            conv.messages += [
                reply,
                Message("tool", [TextPart(_tool_output(turn))], tool_call_id=f"toolu_{turn}"),
            ]
    print(f"{rollouts} rollouts x {turns} calls; prompt {min(tokens)}..{max(tokens)} tokens\n")
    print(f"{'per call (ms)':<14}{'p50':>9}{'mean':>9}{'max':>9}")
    for name, values in rows.items():
        if values:
            print(
                f"{name:<14}{statistics.median(values):>9.3f}{statistics.fmean(values):>9.3f}"
                f"{max(values):>9.3f}"
            )
    print(f"(cached calls tokenize {statistics.fmean(fresh):.0f} new tokens on average)")
    speedup = statistics.median(rows["full"]) / statistics.median(rows["cached"])
    print(f"\ncached vs full re-tokenization (p50): {speedup:.0f}x faster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    args = parser.parse_args()
    run(turns=8 if args.quick else 25, rollouts=2 if args.quick else 6)


if __name__ == "__main__":
    main()
