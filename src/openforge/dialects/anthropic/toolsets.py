"""Anthropic-defined toolsets: ``computer_toolset_20260801``.

A toolset is one ``tools`` entry with no name that offers a family of member tools, each
called by its own name: the computer toolset's members are ``key``, ``left_click``,
``scroll``, ``zoom``, … (every one enabled unless ``configs.<member>.enabled`` is false).
Each enabled member is served as a tool whose schema is the input the vendor documents
for it (``BetaComputer<Member>Input`` in the ``anthropic`` SDK); a call of one comes back
as a ``tool_use`` block of that name carrying ``toolset_name: "computer"``, as Anthropic's
own are. The descriptions are this gateway's own words.
"""

from __future__ import annotations

from typing import Any

from openforge.conversation import ToolSpec
from openforge.dialects.anthropic.protocol import ToolsetTool
from openforge.dialects.errors import ApiError

__all__ = ["TOOLSETS", "toolset_specs"]

# Served toolset versions, by type: the toolset's name (what ``toolset_name`` says).
TOOLSETS = {"computer_toolset_20260801": "computer"}

_POINT = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
_AT = {**_POINT, "description": "(x, y): pixels from the left and top edges of the screen."}
_HOLD = {"type": "string", "description": 'Keys to hold down meanwhile ("ctrl", "ctrl+shift").'}
_KEYS = {"type": "string", "description": 'A key or combination ("Return", "ctrl+s").'}
_SECONDS = {"type": "integer", "minimum": 0, "description": "Seconds."}


def _click(what: str) -> tuple[str, dict[str, Any], list[str]]:
    return (
        f"{what} at `coordinate`, or where the pointer is when it is left out.",
        {"coordinate": _AT, "text": _HOLD},
        [],
    )


# Members of the 2026-08-01 computer toolset in the vendor's order: (description,
# properties, required).
_COMPUTER_MEMBERS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "key": (
        "Press a key or key combination; `+` joins modifiers to a key.",
        {"text": _KEYS, "repeat": {"type": "integer", "minimum": 1, "description": "Times."}},
        ["text"],
    ),
    "hold_key": (
        "Hold a key or key combination down for `duration` seconds.",
        {"text": _KEYS, "duration": _SECONDS},
        ["text", "duration"],
    ),
    "type": ("Type a string on the keyboard.", {"text": {"type": "string"}}, ["text"]),
    "cursor_position": ("Report the pointer's current (x, y).", {}, []),
    "mouse_move": (
        "Move the pointer to `coordinate` without clicking.",
        {"coordinate": _AT},
        ["coordinate"],
    ),
    "left_mouse_down": ("Press the left button where the pointer is and keep it down.", {}, []),
    "left_mouse_up": ("Release the left button.", {}, []),
    "left_click": _click("Click the left button"),
    "left_click_drag": (
        "Press the left button at `start_coordinate`, drag to `coordinate`, release.",
        {"start_coordinate": _AT, "coordinate": _AT, "text": _HOLD},
        ["start_coordinate", "coordinate"],
    ),
    "right_click": _click("Click the right button"),
    "middle_click": _click("Click the middle button"),
    "double_click": _click("Double-click the left button"),
    "triple_click": _click("Triple-click the left button"),
    "scroll": (
        "Turn the wheel `scroll_amount` notches towards `scroll_direction` at `coordinate` "
        "(or where the pointer is); use this, not Page Up/Down, to scroll.",
        {
            "scroll_direction": {"type": "string", "enum": ["up", "down", "left", "right"]},
            "scroll_amount": {"type": "integer", "minimum": 0},
            "coordinate": _AT,
            "text": _HOLD,
        },
        ["scroll_direction", "scroll_amount"],
    ),
    "wait": ("Do nothing for `duration` seconds.", {"duration": _SECONDS}, ["duration"]),
    "screenshot": ("Capture the screen.", {}, []),
    "zoom": (
        "Capture `region` of the screen (screenshot coordinates), enlarged to read details.",
        {
            "region": {
                "type": "array",
                "items": {"type": "integer"},
                "minItems": 4,
                "maxItems": 4,
                "description": "(x0, y0, x1, y1): the corners of the area.",
            }
        },
        ["region"],
    ),
}


def toolset_specs(tool: ToolsetTool, where: str) -> tuple[str, tuple[ToolSpec, ...]]:
    """The toolset's name and the tools its enabled members are served as.

    Refused as Anthropic refuses them, naming the field: a toolset version this gateway
    does not know, a ``configs`` key that is none of the version's members, a toolset
    with every member disabled."""
    at = f"{where.replace('[', '.').replace(']', '')}.{tool.type}"
    toolset = TOOLSETS.get(tool.type)
    if toolset is None:
        known = ", ".join(f"'{k}'" for k in TOOLSETS)
        raise ApiError(
            "invalid_request",
            f"{at}: unknown tool type '{tool.type}': this gateway serves the toolset "
            f"versions {known}.",
            f"{where}.type",
        )
    configs = tool.configs or {}
    for member in configs:
        if member not in _COMPUTER_MEMBERS:
            raise ApiError(
                "invalid_request",
                f"{at}.configs.{member}: Extra inputs are not permitted",
                f"{where}.configs.{member}",
            )
    specs: list[ToolSpec] = []
    for name, (description, props, required) in _COMPUTER_MEMBERS.items():
        config = configs.get(name)
        if config is not None and config.enabled is False:
            continue
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        specs.append(ToolSpec(name, f"{description} (computer toolset)", schema))
    if not specs:
        raise ApiError(
            "invalid_request",
            f"{at}.configs: every member of the toolset is disabled.",
            f"{where}.configs",
        )
    return toolset, tuple(specs)
