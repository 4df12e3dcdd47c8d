"""Incremental rendering: prefix extension, forks, drift, caches — with the real tokenizer."""

from __future__ import annotations

import gc
import json
import random

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforge.conversation import (
    Conversation,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolChoice,
    ToolSpec,
)
from openforge.rendering import Renderer, RolloutHistory
from openforge.rendering.history import RenderedPrompt
from openforge.rendering.tokenizer import load_tokenizer

TOOLS = [
    ToolSpec(
        "read_file",
        "Read a file from the workspace.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSpec(
        "run",
        "Run a shell command.",
        {
            "type": "object",
            "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}},
        },
    ),
]
_WORDS = [
    "ok",
    "file",
    "print",
    "日本",
    "é",
    "🤖",
    "{",
    "}",
    "\n",
    "  ",
    "x<y",
    "done.",
    "<|im_end|>",
]


def _text(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice(_WORDS) + rng.choice(["", " "]) for _ in range(rng.randint(0, n)))


def _sample(renderer: Renderer, rng: random.Random) -> tuple[list[int], str]:
    """Output ids as an engine might sample them, and how it stopped."""
    calls = [
        ToolCall("", rng.choice(["read_file", "run"]), json.dumps({"path": _text(rng, 3)}))
        for _ in range(rng.choice([0, 0, 1, 1, 2]))
    ]
    text = _text(rng).replace("<|im_end|>", "").strip()
    reasoning = rng.choice([None, _text(rng).replace("<|im_end|>", "").strip()])
    ids = renderer.encode_reply(text, reasoning, calls)
    style = rng.choice(["eos", "eos", "eos", "length", "odd"])
    if style == "length":
        return ids[: rng.randint(0, len(ids) - 1)], style
    if style == "odd":
        # A non-canonical tokenization (one token per character), as sampling can produce.
        body = renderer.tokenizer.decode(ids[:-1])
        return [t for ch in body for t in renderer.tokenizer.encode(ch)] + ids[-1:], style
    return ids, style


def _harness_copy(msg: Message, rng: random.Random, turn: int) -> Message:
    """What a harness sends back: its own call ids, re-serialized arguments, maybe no reasoning."""
    calls = [
        ToolCall(f"toolu_{turn}_{i}", c.name, json.dumps(json.loads(c.arguments)))
        for i, c in enumerate(msg.tool_calls)
    ]
    reasoning = msg.reasoning if rng.random() < 0.5 else None
    return Message("assistant", [TextPart(msg.text)], tool_calls=calls, reasoning=reasoning)


def _task(rng: random.Random) -> Conversation:
    return Conversation(
        messages=[
            Message("system", [TextPart("You are a coder.")]),
            Message("user", [TextPart(_text(rng))]),
        ],
        tools=TOOLS,
    )


def _results(msg: Message, rng: random.Random, turn: int) -> list[Message]:
    """What the harness sends after ``msg``: its tools' results, else the user's next word."""
    if not msg.tool_calls:
        return [Message("user", [TextPart(_text(rng))])]
    return [
        Message("tool", [TextPart(_text(rng))], tool_call_id=f"toolu_{turn}_{i}")
        for i in range(len(msg.tool_calls))
    ]


def _reply(renderer: Renderer, rng: random.Random) -> tuple[list[int], Message]:
    """Sampled output ids and the message they parse to."""
    out, _style = _sample(renderer, rng)
    parsed = renderer.parse(out)
    calls, reasoning = parsed.tool_calls, parsed.reasoning
    return out, Message("assistant", [TextPart(parsed.text)], tool_calls=calls, reasoning=reasoning)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), turns=st.integers(1, 20))
def test_each_call_extends_previous_prompt_and_output(
    renderer: Renderer, seed: int, turns: int
) -> None:
    rng = random.Random(seed)
    conv = _task(rng)
    history = renderer.new_history()
    prev: list[int] | None = None
    for turn in range(turns):
        prompt = renderer.render(conv, history)
        assert prompt.ids_json is not None and orjson.loads(prompt.ids_json) == prompt.ids
        if prev is not None:
            assert prompt.ids[: len(prev)] == prev
            assert not prompt.fork, prompt.fork_reason
            assert prompt.parent == turn - 1
        out, msg = _reply(renderer, rng)
        history.record(prompt, out, msg)
        prev = prompt.ids + out
        conv.messages.append(_harness_copy(msg, rng, turn))
        conv.messages += _results(msg, rng, turn)
    assert history.fork_count == 0


def test_token_ids_are_kept_out_of_the_cyclic_gc(renderer: Renderer) -> None:
    """A prompt's ids, its segments' ids and what the history keeps of them are never
    walked by the collector (rendering/untracked.py), whether tokenized now, taken from
    the caches or from a recorded reply."""
    rng = random.Random(7)
    conv = _task(rng)
    history = renderer.new_history()
    seen: set[str] = set()
    for turn in range(4):
        prompt = renderer.render(conv, history)
        assert not gc.is_tracked(prompt.ids)
        for s in prompt.segments:
            assert not gc.is_tracked(s.ids), (turn, s.kind, s.key)
            seen.add(s.kind)
        assert prompt.ids == [i for s in prompt.segments for i in s.ids]
        out, msg = _reply(renderer, rng)
        turn_ = history.record(prompt, out, msg)
        assert not gc.is_tracked(turn_.segment_ids)
        conv.messages.append(_harness_copy(msg, rng, turn))
        conv.messages += _results(msg, rng, turn)
    assert not any(gc.is_tracked(ids) for ids in history.segment_cache.values())
    assert {"system", "user", "reply", "generation"} <= seen, seen
    prefill = renderer.render(
        Conversation([*conv.messages, Message("assistant", [TextPart("Sure")])], tools=TOOLS)
    )
    assert not gc.is_tracked(prefill.segments[-1].ids) and prefill.segments[-1].kind == "prefill"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_segments_tokenize_like_the_whole_prompt(renderer: Renderer, seed: int) -> None:
    rng = random.Random(seed)
    msgs = [Message("system", [TextPart(_text(rng).replace("<|im_end|>", ""))])]
    for _ in range(rng.randint(1, 6)):
        # Replies are left out: they are tokenized apart from their "assistant\n" header,
        # as the model sampled them after the generation prompt.
        role = rng.choice(["user", "tool", "developer", "system"])
        body = _text(rng).replace("<|im_end|>", "")
        msgs.append(Message(role, [TextPart(body)]))  # type: ignore[arg-type]
    msgs.append(Message("user", [TextPart("go")]))
    ids = renderer.render(Conversation(messages=msgs, tools=TOOLS)).ids
    # Segments start and end at special tokens, so tokenizing the whole text agrees.
    text = renderer.tokenizer._template.decode(ids, skip_special_tokens=False)
    assert renderer.tokenizer.encode_template(text) == ids


def _one_turn(renderer: Renderer) -> tuple[Conversation, RolloutHistory, list[int]]:
    conv = Conversation(
        messages=[
            Message("system", [TextPart("Be brief.")]),
            Message("user", [TextPart("List files")]),
        ],
        tools=TOOLS,
    )
    history = renderer.new_history()
    prompt = renderer.render(conv, history)
    out = renderer.encode_reply("Sure.", None, [ToolCall("x", "run", '{"cmd": "ls"}')])
    parsed = renderer.parse(out)
    history.record(
        prompt, out, Message("assistant", [TextPart(parsed.text)], tool_calls=parsed.tool_calls)
    )
    conv.messages += [
        Message(
            "assistant", [TextPart("Sure.")], tool_calls=[ToolCall("h1", "run", '{"cmd":"ls"}')]
        ),
        Message("tool", [TextPart("a.py b.py")], tool_call_id="h1"),
    ]
    return conv, history, prompt.ids + out


def test_edited_history_forks_with_reason(renderer: Renderer) -> None:
    conv, history, _ = _one_turn(renderer)
    conv.messages[1] = Message(
        "user", [TextPart("List files <system-reminder>x</system-reminder>")]
    )
    p = renderer.render(conv, history)
    assert p.fork and p.parent is None
    assert (
        p.fork_reason
        == "message 1 (user) differs from the previous call's (edited, injected or compacted)"
    )


def test_changed_reply_and_new_system_prompt_fork(renderer: Renderer) -> None:
    conv, history, _ = _one_turn(renderer)
    conv.messages[2] = Message(
        "assistant", [TextPart("Sure!")], tool_calls=conv.messages[2].tool_calls
    )
    p = renderer.render(conv, history)
    assert p.fork and p.fork_reason == "message 2 (assistant) is not the previous call's reply"
    conv2, history2, _ = _one_turn(renderer)
    conv2.messages[0] = Message("system", [TextPart("Be thorough.")])
    p2 = renderer.render(conv2, history2)
    assert p2.fork and p2.fork_reason == "the system prompt or tool list changed"
    conv3, history3, _ = _one_turn(renderer)
    del conv3.messages[1:]  # compaction dropped everything but the system prompt
    conv3.messages.append(Message("user", [TextPart("Summary: listed files.")]))
    p3 = renderer.render(conv3, history3)
    assert p3.fork


def test_prompt_json_is_the_prompt_through_edits_forks_and_prefills(renderer: Renderer) -> None:
    """The engine is sent ``ids_json``, assembled from pieces kept per segment: whatever
    the history does, it must be exactly the prompt's ids."""
    conv, history, _ = _one_turn(renderer)
    seen = []
    for edit in range(4):
        p = renderer.render(conv, history)
        seen.append(p)
        out = renderer.encode_reply(f"step {edit}")
        history.record(p, out, Message("assistant", [TextPart(f"step {edit}")]))
        if edit == 1:  # an edited earlier turn: the same key-less text now tokenizes anew
            conv.messages[1] = Message("user", [TextPart("List files, then stop.")])
        conv.messages += [
            Message("assistant", [TextPart(f"step {edit}")]),
            Message("user", [TextPart(f"and {edit}")]),
        ]
    conv.messages.append(Message("assistant", [TextPart("Partial")]))  # a prefill
    seen += [renderer.render(conv, history), renderer.render(conv, history)]
    assert seen[2].fork  # the edit forked, and still the JSON follows the ids
    for p in seen:
        assert p.ids_json is not None and orjson.loads(p.ids_json) == p.ids
    assert renderer.render(conv).ids_json is None  # no history, nothing kept


def test_first_prompts_of_rollouts_share_the_task_json(renderer: Renderer) -> None:
    """Rollouts sending the same task get the JSON of its segments from the renderer,
    made once; a segment whose shared ids were replaced is serialised anew."""
    conv, _, _ = _one_turn(renderer)
    first = [renderer.render(conv, renderer.new_history()) for _ in range(2)]
    for p in first:
        assert p.ids_json is not None and orjson.loads(p.ids_json) == p.ids
    system = first[0].segments[0]
    assert system.kind == "system" and first[1].segments[0].ids is system.ids
    made = renderer.shared_json(system.key, system.ids)
    assert made is not None and made is renderer.shared_json(system.key, system.ids)
    assert orjson.loads(b"[" + made + b"]") == list(system.ids)
    assert renderer.shared_json(system.key, list(system.ids)) is None  # not the shared object
    renderer._shared.put(system.key, [1, 2, 3])
    assert renderer.shared_json(system.key, system.ids) is None
    again = renderer.render(conv, renderer.new_history())
    assert again.ids_json is not None and orjson.loads(again.ids_json) == again.ids


def test_extension_reuses_tokens_and_counts_only_new(renderer: Renderer) -> None:
    conv, history, prev = _one_turn(renderer)
    p = renderer.render(conv, history)
    assert p.ids[: len(prev)] == prev and not p.fork and p.parent == 0
    new_tool_turn = renderer.tokenizer.encode("user\n<tool_response>\na.py b.py\n</tool_response>")
    # Only the tool result turn (im_start + text + im_end + "\n") was tokenized now.
    assert len(p.ids) - p.reused_tokens == len(new_tool_turn) + 3


def test_drift_is_reported_where_retokenizing_differs(renderer: Renderer) -> None:
    conv = Conversation(messages=[Message("user", [TextPart("hi")])])
    history = renderer.new_history()
    prompt = renderer.render(conv, history)
    odd = [t for ch in "Hello there" for t in renderer.tokenizer.encode(ch)] + [renderer.end_id]
    history.record(prompt, odd, Message("assistant", [TextPart("Hello there")]))
    conv.messages += [
        Message("assistant", [TextPart("Hello there")]),
        Message("user", [TextPart("bye")]),
    ]
    p = renderer.render(conv, history)
    assert not p.fork
    assert [(d.message_index, d.position) for d in p.drift] == [(1, len(prompt.ids))]
    assert p.ids[len(prompt.ids) : len(prompt.ids) + len(odd)] == odd


def test_length_stopped_reply_is_closed_with_eos(renderer: Renderer) -> None:
    conv = Conversation(messages=[Message("user", [TextPart("count")])])
    history = renderer.new_history()
    prompt = renderer.render(conv, history)
    out = renderer.tokenizer.encode("one two thr")
    history.record(prompt, out, Message("assistant", [TextPart("one two thr")]))
    conv.messages += [
        Message("assistant", [TextPart("one two thr")]),
        Message("user", [TextPart("go on")]),
    ]
    p = renderer.render(conv, history)
    n = len(prompt.ids) + len(out)
    assert p.ids[:n] == prompt.ids + out and p.ids[n] == renderer.end_id


def test_system_prefix_is_shared_across_rollouts(renderer: Renderer) -> None:
    conv = Conversation(
        messages=[
            Message("system", [TextPart("Shared prompt 4f1c.")]),
            Message("user", [TextPart("a")]),
        ],
        tools=TOOLS,
    )
    first = renderer.render(conv, renderer.new_history())
    conv.messages[1] = Message("user", [TextPart("b")])
    second = renderer.render(conv, renderer.new_history())
    assert first.segments[0].fresh and not second.segments[0].fresh
    assert second.reused_tokens == len(first.segments[0].ids) + len(renderer.generation_ids)


def test_roles_images_prefill_and_count(renderer: Renderer) -> None:
    conv = Conversation(
        messages=[
            Message("developer", [TextPart("Rules.")]),
            Message("user", [TextPart("Look:"), ImagePart("data:image/png;base64,AAAA")]),
            Message("assistant", [TextPart("It shows")]),
        ],
        tool_choice=ToolChoice("required", "run"),
        tools=TOOLS,
    )
    p = renderer.render(conv)
    text = renderer.tokenizer._template.decode(p.ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nRules.\n\n# Tools")
    assert "You must call the function run in this reply." in text
    assert "Look:\n[image omitted: this model reads text only]<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\nIt shows")
    assert p.images == 1
    assert renderer.count_tokens(conv) == len(p.ids)


def test_default_system_prompt_when_none_given(renderer: Renderer) -> None:
    ids = renderer.render(Conversation(messages=[Message("user", [TextPart("hi")])])).ids
    hf = renderer.tokenizer.hf.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert ids == renderer.tokenizer.encode_template(hf)


def test_long_texts_encode_to_the_same_ids_off_the_gil(renderer: Renderer) -> None:
    """Past the length where encoding gives up the GIL (encode_batch), ids are unchanged."""
    from openforge.rendering import tokenizer as tk

    text = "".join(f"line {i}: <|im_start|> ünïcode and words {i * 7}\n" for i in range(3000))
    assert len(text) > tk._RELEASE_GIL_CHARS
    tok = renderer.tokenizer
    assert tok.encode(text) == list(tok._content.encode(text, add_special_tokens=False).ids)
    assert tok.encode_template(text) == list(
        tok._template.encode(text, add_special_tokens=False).ids
    )


def _same_render(a: RenderedPrompt, b: RenderedPrompt) -> None:
    assert a.ids == b.ids and a.ids_json == b.ids_json
    assert (a.fork, a.fork_reason, a.parent, a.path_hash) == (
        b.fork,
        b.fork_reason,
        b.parent,
        b.path_hash,
    )
    assert (a.reused_tokens, a.images, a.image_parts) == (b.reused_tokens, b.images, b.image_parts)
    assert [(d.message_index, d.position) for d in a.drift] == [
        (d.message_index, d.position) for d in b.drift
    ]
    assert [(s.key, list(s.ids), s.message_index, s.kind, s.fresh) for s in a.segments] == [
        (s.key, list(s.ids), s.message_index, s.kind, s.fresh) for s in b.segments
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), calls=st.integers(2, 14))
def test_resumed_render_equals_a_render_from_scratch(
    renderer: Renderer, seed: int, calls: int
) -> None:
    """A render that takes its leading segments from the last render (LastRender) gives
    what rendering every message again gives, through appends, edits, re-created but equal
    messages, images, prefills, unrecorded calls, replies that re-send a reply from another
    turn, and a changed system prompt; a twin history that never resumes renders alongside."""
    rng = random.Random(seed)
    conv = _task(rng)
    # Two renderers of their own: their group-shared segment caches then see the same
    # renders, so "fresh" and reused counts compare too.
    renderer, twin = _twin_renderers(renderer)
    resumed, scratch = renderer.new_history(), twin.new_history()
    replies: list[Message] = []
    took = 0
    for turn in range(calls):
        scratch.last_render = None
        before = resumed.last_render
        a = renderer.render(conv, resumed)
        b = twin.render(conv, scratch)
        _same_render(a, b)
        took += before is not None and any(
            s is t for s, t in zip(a.segments[1:], before.segments[1:], strict=False)
        )
        if conv.messages[-1].role == "assistant":  # a prefill: answer it, then go on
            conv.messages.pop()
        out, msg = _reply(renderer, rng)
        if rng.random() < 0.85:  # else the call failed: nothing recorded
            resumed.record(a, out, msg)
            scratch.record(b, out, msg)
        replies.append(msg)
        op = rng.choice(["append"] * 6 + ["edit", "recreate", "image", "prefill", "old", "system"])
        if op == "edit" and len(conv.messages) > 2:
            at = rng.randrange(1, len(conv.messages))
            conv.messages[at] = Message("user", [TextPart(_text(rng))])
        elif op == "recreate" and len(conv.messages) > 2:
            at = rng.randrange(0, len(conv.messages))  # 0: a system made anew, equal
            old = conv.messages[at]
            conv.messages[at] = Message(
                old.role, list(old.content), tool_calls=list(old.tool_calls),
                tool_call_id=old.tool_call_id, reasoning=old.reasoning,
            )  # fmt: skip
        elif op == "system":
            conv.messages[0] = Message("system", [TextPart(f"You are coder {turn}.")])
        conv.messages.append(_harness_copy(rng.choice(replies) if op == "old" else msg, rng, turn))
        if op == "image":
            conv.messages.append(
                Message("user", [TextPart("See:"), ImagePart("data:image/png;base64,AAAA")])
            )
        else:
            conv.messages += _results(msg, rng, turn)
        if op == "prefill":
            conv.messages.append(Message("assistant", [TextPart(_text(rng, 3))]))
    _RESUMED.append(took)


_RESUMED: list[int] = []
_TWINS: list[Renderer] = []


def _twin_renderers(renderer: Renderer) -> tuple[Renderer, Renderer]:
    if not _TWINS:
        _TWINS.extend(Renderer(load_tokenizer(str(renderer.tokenizer.path))) for _ in range(2))
    return _TWINS[0], _TWINS[1]


def test_resumption_was_exercised() -> None:
    """The property above took segments from a last render in its rollouts (in ~63% of
    them over 300 examples: one of two calls needs a recorded call before it)."""
    if _RESUMED:
        assert sum(1 for n in _RESUMED if n) > len(_RESUMED) // 4, _RESUMED
