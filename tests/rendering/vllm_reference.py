"""Run vLLM's own output parsers over a corpus of token ids: the reference side of the
differential tests (tests/rendering/test_vllm_differential.py).

This file runs under the vLLM environment's Python (``.venv-vllm``), not OpenForge's: it
imports vLLM only (once: importing it takes most of the time). It reads a JSON list of
specs on stdin, one per model family::

    {"model": DIR, "tool_parser": NAME, "reasoning_parser": NAME | null,
     "tools": [OpenAI tool objects], "prompt": [prompt ids],
     "cases": [{"ids": [...], "chunks": [[...], ...], "stop": [id] | [], "thinking": bool}]}

and writes a JSON list (per spec, a list per case) on stdout: ``{"whole": R, "stream": R,
"tokens": R}`` where R is
``{"content", "reasoning", "calls": [[name, arguments], ...]}`` or ``{"error": "..."}``.
``whole`` is vLLM's non-streaming parse of the decoded output; ``stream`` feeds the same
ids chunk by chunk through ``parse_delta`` (as its serving layer does: with the prompt's
ids, and the stop token last, as a chunk of no text that finishes the stream) and joins
the deltas; ``tokens`` streams one token per delta. ``thinking`` goes to the parser as the
chat template's ``enable_thinking`` / ``thinking`` (vLLM's reasoning parsers start inside
the reasoning block unless a request turns thinking off).
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any


def _request(tools: list[dict[str, Any]]) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "x"}],
        tools=tools or None,
        tool_choice="auto" if tools else "none",
    )


def _calls(calls: Any) -> list[list[str]]:
    return [[c.name, c.arguments] for c in calls or []]


def _parser(parser_cls: Any, tok: Any, request: Any, thinking: bool) -> Any:
    kwargs = {"enable_thinking": thinking, "thinking": thinking}
    return parser_cls(tok, request.tools, chat_template_kwargs=kwargs)


def _whole(
    parser_cls: Any, tok: Any, spec: dict[str, Any], ids: list[int], thinking: bool
) -> dict[str, Any]:
    request = _request(spec["tools"])
    parser = _parser(parser_cls, tok, request, thinking)
    request = parser.adjust_request(request)
    parser.set_prompt_token_ids(spec["prompt"])
    text = tok.decode(ids, skip_special_tokens=request.skip_special_tokens)
    reasoning, content, calls = parser.parse(
        text, request, enable_auto_tools=True, model_output_token_ids=ids
    )
    return {"content": content or "", "reasoning": reasoning, "calls": _calls(calls)}


def _stream(
    parser_cls: Any,
    tok: Any,
    spec: dict[str, Any],
    chunks: list[list[int]],
    stop: list[int],
    thinking: bool,
) -> dict[str, Any]:
    request = _request(spec["tools"])
    parser = _parser(parser_cls, tok, request, thinking)
    request = parser.adjust_request(request)
    parser.set_prompt_token_ids(spec["prompt"])
    skip = request.skip_special_tokens
    seen: list[int] = []
    emitted = ""
    content, reasoning = "", None
    calls: dict[int, list[str]] = {}
    steps = [(chunk, False) for chunk in chunks] + ([(stop, True)] if stop else [])
    for n, (chunk, is_stop) in enumerate(steps):
        last = n == len(steps) - 1
        if is_stop:
            delta = ""  # a stop token is never part of the output's text
        else:
            seen += chunk
            text = tok.decode(seen, skip_special_tokens=skip)
            if text.endswith("\ufffd") and not last:
                delta = ""  # a character split across tokens: wait for the rest
            else:
                delta, emitted = text[len(emitted) :], text
        msg = parser.parse_delta(delta, list(chunk), request, spec["prompt"], finished=last)
        if msg is None:
            continue
        content += msg.content or ""
        if msg.reasoning is not None:
            reasoning = (reasoning or "") + msg.reasoning
        for tc in msg.tool_calls or []:
            entry = calls.setdefault(tc.index, ["", ""])
            if tc.function is not None:
                entry[0] += tc.function.name or ""
                entry[1] += tc.function.arguments or ""
    ordered = [calls[i] for i in sorted(calls)]
    return {"content": content, "reasoning": reasoning, "calls": ordered}


def _run(spec: dict[str, Any]) -> list[dict[str, Any]]:
    from vllm.parser.parser_manager import ParserManager
    from vllm.tokenizers import get_tokenizer

    tok = get_tokenizer(spec["model"])
    parser_cls = ParserManager.get_parser(
        tool_parser_name=spec["tool_parser"],
        reasoning_parser_name=spec["reasoning_parser"],
        enable_auto_tools=True,
        tokenizer=tok,
    )
    out = []
    for case in spec["cases"]:
        result: dict[str, Any] = {}
        thinking, stop = case["thinking"], case["stop"]
        for key in ("whole", "stream", "tokens"):
            try:
                if key == "whole":
                    result[key] = _whole(parser_cls, tok, spec, case["ids"], thinking)
                else:
                    chunks = case["chunks"] if key == "stream" else [[i] for i in case["ids"]]
                    result[key] = _stream(parser_cls, tok, spec, chunks, stop, thinking)
            except Exception as exc:  # a parser that raises is a result too
                result[key] = {"error": f"{type(exc).__name__}: {exc}"}
                if spec.get("debug"):
                    traceback.print_exc()
        out.append(result)
    return out


def main() -> None:
    json.dump([_run(spec) for spec in json.load(sys.stdin)], sys.stdout)


if __name__ == "__main__":
    main()
