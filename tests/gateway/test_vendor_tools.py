"""Anthropic's defined tools (computer, bash, text editor, every served version) through a
real gateway with the official SDK: the schema reaches the prompt, the scripted policy's
calls come back as ``tool_use`` blocks in the vendor's shape, screenshots go back in as
images stored once, and each call extends the last token-exactly."""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from PIL import Image

from openforge.dialects.anthropic.defined import VERSIONS
from openforge.gateway.server import Gateway
from openforge.rendering import load_tokenizer

from .conftest import MODEL, anthropic_client, new_rollout, rollout_calls


def screenshot(seed: int) -> bytes:
    """A distinct 64x40 PNG per ``seed``."""
    img = Image.frombytes("RGB", (64, 40), hashlib.shake_256(str(seed).encode()).digest(7680))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def _tool(kind: str) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": kind, "name": VERSIONS[kind].name}
    if kind.startswith("computer_"):
        tool |= {"display_width_px": 1280, "display_height_px": 800, "display_number": 1}
    if kind == "computer_20251124":
        tool["enable_zoom"] = True
    if kind == "text_editor_20250728":
        tool["max_characters"] = 5000
    return tool


# Per version: two calls the policy makes, in the vendor's argument shape, and text the
# rendered schema must hold (the version's own actions or commands).
_CALLS: dict[str, tuple[list[dict[str, Any]], list[str]]] = {
    "computer_20241022": (
        [{"action": "screenshot"}, {"action": "mouse_move", "coordinate": [640, 400]}],
        ["1280x800", '"cursor_position"', "display :1"],
    ),
    "computer_20250124": (
        [
            {"action": "screenshot"},
            {
                "action": "scroll",
                "coordinate": [640, 400],
                "scroll_direction": "down",
                "scroll_amount": 3,
            },
        ],
        ['"triple_click"', '"scroll_direction"', '"hold_key"'],
    ),
    "computer_20251124": (
        [
            {"action": "left_click", "coordinate": [12, 34]},
            {"action": "zoom", "region": [0, 0, 640, 400]},
        ],
        ['"zoom"', '"region"'],
    ),
    "bash_20241022": ([{"command": "ls /"}, {"restart": True}], ['"restart"']),
    "bash_20250124": ([{"command": "ls /"}, {"command": "pwd"}], ['"command"']),
    "text_editor_20241022": (
        [{"command": "view", "path": "/tmp/a.txt"}, {"command": "undo_edit", "path": "/tmp/a.txt"}],
        ['"undo_edit"', '"view_range"'],
    ),
    "text_editor_20250124": (
        [
            {"command": "create", "path": "/tmp/a.txt", "file_text": "one\n"},
            {"command": "insert", "path": "/tmp/a.txt", "insert_line": 1, "new_str": "two"},
        ],
        ['"undo_edit"', '"insert_line"'],
    ),
    "text_editor_20250429": (
        [
            {"command": "view", "path": "/tmp/a.txt", "view_range": [1, -1]},
            {"command": "str_replace", "path": "/tmp/a.txt", "old_str": "one", "new_str": "1"},
        ],
        ['"str_replace"'],
    ),
    "text_editor_20250728": (
        [{"command": "view", "path": "/tmp"}, {"command": "view", "path": "/tmp/a.txt"}],
        ["at most 5000 characters"],
    ),
}


def _result(kind: str, use_id: str, seed: int) -> dict[str, Any]:
    """The tool result a harness sends: a screenshot for the computer, text otherwise."""
    if kind.startswith("computer_"):
        png = base64.b64encode(screenshot(seed)).decode()
        content: Any = [
            {"type": "text", "text": "done"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        ]
    else:
        content = f"output {seed}"
    return {"type": "tool_result", "tool_use_id": use_id, "content": content}


@pytest.mark.parametrize("kind", sorted(VERSIONS))
async def test_defined_tool_round_trip(kind: str, make_gateway: Callable[..., Gateway]) -> None:
    calls, schema_text = _CALLS[kind]
    name = VERSIONS[kind].name
    script = [{"tool_calls": [{"name": name, "arguments": a}]} for a in calls]
    async with make_gateway([*script, {"text": "All done."}]) as gw:
        r = await new_rollout(gw)
        client = anthropic_client(r)
        tools: Any = [_tool(kind)]
        msgs: list[Any] = [{"role": "user", "content": "Do the task."}]
        first = await client.beta.messages.create(
            model="claude-x",
            max_tokens=512,
            messages=msgs,
            tools=tools,
            betas=["computer-use-2025-01-24"],
        )
        assert first.stop_reason == "tool_use"
        use = first.content[-1]
        assert use.type == "tool_use" and use.name == name and use.input == calls[0]
        msgs += [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {"role": "user", "content": [_result(kind, use.id, 1)]},
        ]
        async with client.beta.messages.stream(
            model="claude-x", max_tokens=512, messages=msgs, tools=tools
        ) as stream:
            second = await stream.get_final_message()
        use2 = second.content[-1]
        assert use2.type == "tool_use" and use2.name == name and use2.input == calls[1]
        # Every screenshot is sent again on the last call: stored once each.
        msgs += [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in second.content],
            },
            {"role": "user", "content": [_result(kind, use2.id, 2)]},
        ]
        done = await client.beta.messages.create(
            model="claude-x", max_tokens=512, messages=msgs, tools=tools
        )
        assert done.content[0].type == "text" and done.content[0].text == "All done."
        rec = await rollout_calls(gw, r["rollout_id"])
        shots = 2 if kind.startswith("computer_") else 0
        assert await gw.store.blob_bytes() == sum(len(screenshot(s)) for s in range(1, shots + 1))
    assert len(rec["calls"]) == 3
    prompt = load_tokenizer(MODEL).decode(rec["calls"][0]["prompt_ids"])
    assert f'"name": "{name}"' in prompt
    for text in schema_text:
        assert text in prompt, text
    for before, after in itertools.pairwise(rec["calls"]):
        assert after["status"] == "ok" and not after["fork"]
        prefix = before["prompt_ids"] + before["output_ids"]
        assert after["prompt_ids"][: len(prefix)] == prefix


async def test_defined_tools_are_counted(gateway: Gateway) -> None:
    r = await new_rollout(gateway)
    client = anthropic_client(r)
    counted = await client.beta.messages.count_tokens(
        model="claude-x",
        messages=[{"role": "user", "content": "hi"}],
        tools=[_tool("computer_20250124"), _tool("bash_20250124")],
    )
    bare = await client.beta.messages.count_tokens(
        model="claude-x", messages=[{"role": "user", "content": "hi"}]
    )
    assert counted.input_tokens > bare.input_tokens + 100  # the schemas are in the prompt


@pytest.mark.parametrize(
    ("tool", "where", "words"),
    [
        (
            {
                "type": "computer_29990101",
                "name": "computer",
                "display_width_px": 8,
                "display_height_px": 8,
            },
            "tools.0.computer_29990101:",
            "unknown tool type 'computer_29990101'",
        ),
        ({"type": "bash_20990101", "name": "bash"}, "tools.0.bash_20990101:", "'bash_20990101'"),
        (
            {"type": "text_editor_20250728", "name": "str_replace_editor"},
            "tools.0.text_editor_20250728.name:",
            "Input should be 'str_replace_based_edit_tool'",
        ),
        (
            {"type": "computer_20250124", "name": "computer", "display_width_px": 8},
            "tools.0.computer_20250124.display_height_px:",
            "Field required",
        ),
        (
            {
                "type": "computer_20250124",
                "name": "computer",
                "display_width_px": 8,
                "display_height_px": 8,
                "enable_zoom": True,
            },
            "tools.0.computer_20250124.enable_zoom:",
            "Extra inputs are not permitted",
        ),
        (
            {
                "type": "text_editor_20250429",
                "name": "str_replace_based_edit_tool",
                "max_characters": 9,
            },
            "tools.0.text_editor_20250429.max_characters:",
            "Extra inputs",
        ),
    ],
)
async def test_defined_tool_refusals(
    gateway: Gateway, tool: dict[str, Any], where: str, words: str
) -> None:
    r = await new_rollout(gateway)
    client = anthropic_client(r)
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(
            model="claude-x",
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            tools=[tool],
        )
    assert err.value.status_code == 400
    body: Any = err.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert words in body["error"]["message"]
    # Anthropic's envelope has no param: its message starts with the field's path.
    assert body["error"]["message"].startswith(where)


async def test_computer_toolset_round_trip(make_gateway: Callable[..., Gateway]) -> None:
    click = {"coordinate": [120, 45], "text": "shift"}
    scroll = {"scroll_direction": "down", "scroll_amount": 2}
    script = [
        {"tool_calls": [{"name": "left_click", "arguments": click}]},
        {"tool_calls": [{"name": "scroll", "arguments": scroll}]},
        {"text": "Scrolled."},
    ]
    toolset: Any = {"type": "computer_toolset_20260801", "configs": {"zoom": {"enabled": False}}}
    async with make_gateway(script) as gw:
        r = await new_rollout(gw)
        client = anthropic_client(r)
        msgs: list[Any] = [{"role": "user", "content": "Scroll the list."}]
        first = await client.beta.messages.create(
            model="claude-x", max_tokens=256, messages=msgs, tools=[toolset]
        )
        use = first.content[-1]
        assert use.type == "tool_use" and use.name == "left_click"
        assert use.toolset_name == "computer" and use.input == click
        msgs += [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {"role": "user", "content": [_result("computer_toolset", use.id, 5)]},
        ]
        async with client.beta.messages.stream(
            model="claude-x", max_tokens=256, messages=msgs, tools=[toolset]
        ) as stream:
            second = await stream.get_final_message()
        use2 = second.content[-1]
        assert use2.type == "tool_use" and use2.name == "scroll"
        assert use2.toolset_name == "computer" and use2.input == scroll
        msgs += [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in second.content],
            },
            {"role": "user", "content": [_result("computer_toolset", use2.id, 6)]},
        ]
        done = await client.beta.messages.create(
            model="claude-x", max_tokens=256, messages=msgs, tools=[toolset]
        )
        assert done.content[0].type == "text" and done.content[0].text == "Scrolled."
        rec = await rollout_calls(gw, r["rollout_id"])
    prompt = load_tokenizer(MODEL).decode(rec["calls"][0]["prompt_ids"])
    assert '"name": "left_click"' in prompt and '"name": "triple_click"' in prompt
    assert '"name": "zoom"' not in prompt  # disabled in configs
    for before, after in itertools.pairwise(rec["calls"]):
        assert after["status"] == "ok" and not after["fork"]
        prefix = before["prompt_ids"] + before["output_ids"]
        assert after["prompt_ids"][: len(prefix)] == prefix


@pytest.mark.parametrize(
    ("tool", "where"),
    [
        ({"type": "computer_toolset_29990101"}, "tools.0.computer_toolset_29990101:"),
        (
            {"type": "computer_toolset_20260801", "configs": {"teleport": {"enabled": True}}},
            "tools.0.computer_toolset_20260801.configs.teleport:",
        ),
        (
            {"type": "computer_toolset_20260801", "configs": {"type": {"enabled": True}}}
            | {"extra": 1},
            None,
        ),
    ],
)
async def test_toolset_refusals(gateway: Gateway, tool: dict[str, Any], where: str | None) -> None:
    r = await new_rollout(gateway)
    client = anthropic_client(r)
    tools: Any = [tool, {"name": "type", "input_schema": {"type": "object"}}]
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(
            model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "x"}], tools=tools
        )
    message = err.value.body["error"]["message"]  # type: ignore[index]
    # The last case is valid alone; beside a custom tool named "type" it is a duplicate.
    assert message.startswith(where) if where else "Tool names must be unique" in message
