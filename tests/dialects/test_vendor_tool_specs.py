"""The vendors' tool types as the parsers serve them: the schema each version shows the
model, and forced choices of them (the SDK round trips are in tests/gateway)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from openforge.dialects.anthropic import parse_count_tokens_request, parse_request
from openforge.dialects.anthropic.defined import VERSIONS
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_responses import parse_request as parse_responses


def _body(tools: list[Any], **extra: Any) -> bytes:
    msgs = [{"role": "user", "content": "hi"}]
    return orjson.dumps({"model": "m", "max_tokens": 8, "messages": msgs, "tools": tools} | extra)


def _computer(kind: str, **options: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "name": "computer",
        "display_width_px": 1024,
        "display_height_px": 768,
        **options,
    }


@pytest.mark.parametrize(
    ("tool", "actions"),
    [
        (_computer("computer_20241022"), 10),
        (_computer("computer_20250124"), 16),
        (_computer("computer_20251124"), 16),
        (_computer("computer_20251124", enable_zoom=True), 17),
    ],
)
def test_each_computer_version_shows_its_actions(tool: dict[str, Any], actions: int) -> None:
    (spec,) = parse_request(_body([tool])).tools
    enum = spec.parameters["properties"]["action"]["enum"]
    assert len(enum) == actions and len(set(enum)) == actions
    assert ("zoom" in enum) == ("region" in spec.parameters["properties"])
    assert "1024x768" in spec.description
    assert ("scroll_amount" in spec.parameters["properties"]) == (
        tool["type"] != "computer_20241022"
    )


def test_editor_versions_and_forced_choice() -> None:
    old = VERSIONS["text_editor_20250124"].name
    new = VERSIONS["text_editor_20250728"].name
    tools = [
        {"type": "text_editor_20250124", "name": old},
        {"type": "bash_20250124", "name": "bash"},
    ]
    conv = parse_request(_body(tools, tool_choice={"type": "tool", "name": "bash"}))
    assert [t.name for t in conv.tools] == [old, "bash"]
    assert "undo_edit" in conv.tools[0].parameters["properties"]["command"]["enum"]
    assert conv.tool_choice.mode == "required" and conv.tool_choice.name == "bash"
    (latest,) = parse_count_tokens_request(
        _body([{"type": "text_editor_20250728", "name": new}])
    ).tools
    assert "undo_edit" not in latest.parameters["properties"]["command"]["enum"]


def test_toolset_members_and_forced_member() -> None:
    toolset = {"type": "computer_toolset_20260801", "configs": {"wait": {"enabled": False}}}
    conv = parse_request(_body([toolset], tool_choice={"type": "tool", "name": "left_click"}))
    names = [t.name for t in conv.tools]
    assert len(names) == 16 and "wait" not in names and "zoom" in names
    assert conv.metadata["toolsets"]["left_click"] == "computer"
    assert conv.tool_choice.name == "left_click"
    with pytest.raises(ApiError) as err:
        parse_request(_body([toolset], tool_choice={"type": "tool", "name": "wait"}))
    assert err.value.param == "tool_choice.name"


def test_responses_computer_tool_and_items() -> None:
    tool = {"type": "computer_use_preview", "display_width": 800, "display_height": 600}
    tool["environment"] = "browser"
    click = {"type": "click", "button": "left", "x": 1, "y": 2, "keys": None}
    items = [
        {"role": "user", "content": "go"},
        {"type": "computer_call", "call_id": "c1", "action": click, "status": "completed"},
        {
            "type": "computer_call_output",
            "call_id": "c1",
            "output": {"type": "computer_screenshot", "image_url": "https://example.test/s.png"},
        },
    ]
    conv = parse_responses(orjson.dumps({"model": "m", "input": items, "tools": [tool]}))
    (spec,) = conv.tools
    assert (
        spec.name == "computer"
        and "800x600" in spec.description
        and "(browser)" in spec.description
    )
    call = conv.messages[1].tool_calls[0]
    assert orjson.loads(call.arguments) == {"type": "click", "button": "left", "x": 1, "y": 2}
    result = conv.messages[2]
    assert result.role == "tool" and result.tool_call_id == "c1"
    assert conv.metadata["computer_use"] == tool
