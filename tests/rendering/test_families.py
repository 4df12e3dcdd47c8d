"""Every model family: detection, reply round trips (whole and streamed), malformed calls,
and token-exact prompts against ``apply_chat_template`` on tiny family tokenizers."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from openforge.conversation import (
    CompletionDelta,
    Conversation,
    Message,
    ReasoningDelta,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    ToolSpec,
)
from openforge.models.tiny_families import TINY_FAMILIES, build_tiny_family
from openforge.rendering import Renderer, load_tokenizer
from openforge.rendering.families.catalog import FAMILIES, FamilyError, resolve_family
from openforge.rendering.hf_template import hf_messages
from openforge.rendering.parsing import ParsedOutput

from .family_cases import CALLS, CLEAN, MARKERS, schema_tools, typed_consistently

NAMES = sorted(TINY_FAMILIES)


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: build_tiny_family(name, root / name) for name in NAMES}


def _renderer(dirs: dict[str, Path], name: str) -> Renderer:
    return Renderer(load_tokenizer(dirs[name]))


@pytest.mark.parametrize("name", NAMES)
def test_each_tiny_model_is_detected_as_its_family(family_dirs: dict[str, Path], name: str) -> None:
    r = _renderer(family_dirs, name)
    assert r.family.name == name
    assert r.uses_model_template


def test_override_names_a_format_and_unknown_names_are_refused(
    family_dirs: dict[str, Path],
) -> None:
    tok = load_tokenizer(family_dirs["qwen3_coder"])
    fam = resolve_family(tok, tool_format="hermes", reasoning_format="none")
    assert (fam.tools.name, fam.reasoning) == ("hermes", None)
    with pytest.raises(FamilyError, match=r"known: .*hermes"):
        resolve_family(tok, tool_format="nope")
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)


# ---- round trips --------------------------------------------------------------------------


def _stream(
    r: Renderer, ids: list[int], rng: random.Random, tools: list[ToolSpec]
) -> tuple[list[CompletionDelta], ParsedOutput]:
    n = iter(range(1000))
    parser = r.stream_parser(lambda: f"id_{next(n)}", tools=tools)
    events: list[CompletionDelta] = []
    i = 0
    while i < len(ids):
        k = rng.randint(1, 4)
        events += parser.feed(ids[i : i + k])
        i += k
    events += parser.flush()
    return events, parser.finish()


def _joined(events: list[CompletionDelta]) -> tuple[str, str, list[tuple[str, str]]]:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    calls: list[list[str]] = []
    for e in events:
        if isinstance(e, ToolCallStart):
            calls.append([e.name, ""])
        elif isinstance(e, ToolCallArgumentsDelta):
            calls[e.index][1] += e.arguments
    return text, reasoning, [(a, b) for a, b in calls]


@pytest.mark.parametrize("name", NAMES)
def test_replies_round_trip_whole_and_streamed(family_dirs: dict[str, Path], name: str) -> None:
    r = _renderer(family_dirs, name)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=CLEAN, reasoning=st.none() | CLEAN, calls=CALLS, seed=st.integers(0, 2**16))
    def check(
        text: str, reasoning: str | None, calls: list[tuple[str, dict[str, Any]]], seed: int
    ) -> None:
        assume(not text.startswith(MARKERS) and not (reasoning or "").startswith(MARKERS))
        assume(typed_consistently(calls))
        if r.family.reasoning is None:
            reasoning = None
        tools = schema_tools(calls)
        tool_calls = [ToolCall(f"c{i}", n, json.dumps(a)) for i, (n, a) in enumerate(calls)]
        ids = r.encode_reply(text, reasoning, tool_calls)
        parsed = r.parse(ids, tools=tools)
        assert parsed.malformed == 0
        assert parsed.text == text
        assert parsed.reasoning == reasoning
        assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == calls
        events, streamed = _stream(r, ids, random.Random(seed), tools)
        assert (streamed.text, streamed.reasoning, streamed.malformed) == (
            parsed.text,
            parsed.reasoning,
            0,
        )
        assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
            (c.name, c.arguments) for c in parsed.tool_calls
        ]
        joined = _joined(events)
        assert joined == (
            parsed.text,
            parsed.reasoning or "",
            [(c.name, c.arguments) for c in parsed.tool_calls],
        )

    check()


# One malformed call per family, written as its model would write a broken one.
_MALFORMED: dict[str, str] = {
    "qwen3_coder": "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
    "gpt_oss": "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{not json",
    "llama3_json": '{"name": "f", "parameters": {"a": 1}} trailing words',
    "mistral": "[TOOL_CALLS]f[ARGS]{broken",
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
    "<|tool_call_argument_begin|>[1, 2]<|tool_call_end|><|tool_calls_section_end|>",
    "deepseek_v31": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{x}"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "glm45": "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>",
}


@pytest.mark.parametrize("name", NAMES)
def test_malformed_calls_stay_visible_and_are_counted(
    family_dirs: dict[str, Path], name: str
) -> None:
    r = _renderer(family_dirs, name)
    raw = _MALFORMED[name]
    parsed = r.parse(r.tokenizer.encode_template(raw))
    assert (parsed.malformed, parsed.tool_calls) == (1, [])
    assert parsed.text == raw


# ---- token-exact prompts ------------------------------------------------------------------

TOOLS = [
    ToolSpec(
        "bash",
        "Run a shell command.",
        {"type": "object", "properties": {"command": {"type": "string"}}},
    )
]


def _template_ids(r: Renderer, conv: Conversation) -> list[int]:
    msgs, _ = hf_messages(conv)
    tools = [
        {"type": "function", "function": {"name": t.name, "description": t.description,
                                          "parameters": t.parameters}}
        for t in conv.tools
    ]  # fmt: skip
    out = r.tokenizer.hf.apply_chat_template(
        msgs, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(out)


# GLM's template closes no assistant turn with a token of its own (the next turn's
# <|observation|> or <|user|> ends it), so a sampled reply cannot be spliced: it forks.
_SPLICES = [n for n in NAMES if n != "glm45"]


def _msg(role: Any, text: str, **kw: Any) -> Message:
    return Message(role=role, content=[TextPart(text)], **kw)


@pytest.mark.parametrize("name", NAMES)
def test_first_prompt_equals_apply_chat_template(family_dirs: dict[str, Path], name: str) -> None:
    r = _renderer(family_dirs, name)
    conv = Conversation(
        messages=[_msg("system", "Be brief."), _msg("user", "Say hi 🤖.")],
        tools=TOOLS,
    )
    assert r.render(conv, r.new_history()).ids == _template_ids(r, conv)


@pytest.mark.parametrize("name", _SPLICES)
def test_sampled_reply_is_reused_and_the_prompt_stays_template_exact(
    family_dirs: dict[str, Path], name: str
) -> None:
    r = _renderer(family_dirs, name)
    history = r.new_history()
    msgs = [_msg("system", "Be brief."), _msg("user", "List the files.")]
    first = r.render(Conversation(messages=list(msgs), tools=TOOLS), history)
    # DeepSeek's template thinks only when asked (thinking=True), and this one is not.
    thinks = r.family.reasoning is not None and name != "deepseek_v31"
    reasoning = "I should run ls." if thinks else None
    call = ToolCall("call_1", "bash", json.dumps({"command": "ls -la"}))
    output = r.encode_reply("", reasoning, [call])
    parsed = r.parse(output, tools=TOOLS)
    reply = Message(role="assistant", content=[], reasoning=parsed.reasoning,
                    tool_calls=[ToolCall("call_1", c.name, c.arguments)
                                for c in parsed.tool_calls])  # fmt: skip
    history.record(first, output, reply)
    msgs += [reply, _msg("tool", "a.txt b.txt", tool_call_id="call_1")]
    conv = Conversation(messages=msgs, tools=TOOLS)
    second = r.render(conv, history)
    assert second.ids[: len(first.ids) + len(output)] == first.ids + output
    assert (second.fork, second.parent) == (False, 0)
    assert second.ids == _template_ids(r, conv)


# ---- a user's own model directory ---------------------------------------------------------

USER_MODEL = os.environ.get("OPENFORGE_FAMILY_MODEL")


@pytest.mark.skipif(
    not USER_MODEL,
    reason="OPENFORGE_FAMILY_MODEL names no model directory (a user's own model: see "
    "docs/rendering.md)",
)
def test_user_model_renders_token_exact_and_reuses_replies() -> None:
    assert USER_MODEL is not None
    r = Renderer(load_tokenizer(USER_MODEL))
    conv = Conversation(messages=[_msg("user", "List the files.")], tools=TOOLS)
    history = r.new_history()
    first = r.render(conv, history)
    if r.uses_model_template:  # else OpenForge's own tool template renders it (SmolLM2)
        assert first.ids == _template_ids(r, conv), f"family {r.family.name}"
    call = ToolCall("call_1", "bash", json.dumps({"command": "ls -la"}))
    output = r.encode_reply("", None, [call])
    parsed = r.parse(output, tools=TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("bash", {"command": "ls -la"})
    ]
    reply = Message(role="assistant", content=[], tool_calls=[ToolCall("call_1", "bash",
                    parsed.tool_calls[0].arguments)])  # fmt: skip
    history.record(first, output, reply)
    msgs = [*conv.messages, reply, _msg("tool", "a.txt", tool_call_id="call_1")]
    second = r.render(Conversation(messages=msgs, tools=TOOLS), history)
    if second.fork:  # only a family whose template re-renders earlier turns may fork
        assert r.family.rerenders, second.fork_reason
    else:
        assert second.ids[: len(first.ids) + len(output)] == first.ids + output


def test_a_template_that_rewrites_a_finished_answer_forks_with_its_reason(
    family_dirs: dict[str, Path],
) -> None:
    # gpt-oss samples a final answer ending <|return|> and its template writes that turn
    # back ending <|end|>: the next call cannot extend prompt + sampled ids.
    r = _renderer(family_dirs, "gpt_oss")
    history = r.new_history()
    msgs = [_msg("user", "Say hi.")]
    first = r.render(Conversation(messages=list(msgs)), history)
    output = r.encode_reply("Hi!", "Greet.", [])
    assert r.tokenizer.special_text(output[-1]) == "<|return|>"
    reply = Message(role="assistant", content=[TextPart("Hi!")], reasoning="Greet.")
    history.record(first, output, reply)
    conv = Conversation(messages=[*msgs, reply, _msg("user", "Again.")])
    second = r.render(conv, history)
    assert second.fork and second.parent is None
    assert second.fork_reason is not None and "<|return|> as <|end|>" in second.fork_reason
    assert second.ids == _template_ids(r, conv)  # rendered from the template's text


def test_reasoning_opened_by_the_prompt_is_read_from_the_first_token(
    family_dirs: dict[str, Path],
) -> None:
    # DeepSeek V3.1 in thinking mode: the generation prompt ends "<think>", so the reply
    # starts inside the reasoning block and writes only its close tag.
    r = _renderer(family_dirs, "deepseek_v31")
    prompt = r.render(Conversation(messages=[_msg("user", "Hi.")], tools=TOOLS)).ids
    think = r.tokenizer.token_id("<think>")
    assert think is not None
    opened = [*prompt[:-1], think]
    ids = r.encode_pieces([("Plan it.", False), ("</think>", True)])
    ids += r.encode_reply("Done.", None, [ToolCall("c", "bash", '{"command": "ls"}')])
    parsed = r.parse(ids, tools=TOOLS, prompt_ids=opened)
    assert (parsed.reasoning, parsed.text) == ("Plan it.", "Done.")
    assert [c.name for c in parsed.tool_calls] == ["bash"]
    parser = r.stream_parser(tools=TOOLS, prompt_ids=opened)
    for i in range(0, len(ids), 2):
        parser.feed(ids[i : i + 2])
    streamed = parser.finish()
    assert (streamed.reasoning, streamed.text, streamed.tool_calls[0].name) == (
        "Plan it.",
        "Done.",
        "bash",
    )
    # Under the non-thinking prompt ("</think>" last) the same ids are no reasoning.
    assert r.parse(ids, tools=TOOLS, prompt_ids=prompt).reasoning is None
