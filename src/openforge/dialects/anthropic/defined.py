"""Anthropic-defined client tools: computer, bash and text editor, by version.

Anthropic's own models carry these tools' schemas in their weights, so a request names a
version and its options only (``{"type": "computer_20250124", "name": "computer",
"display_width_px": 1280, "display_height_px": 800}``). A policy under training knows
none of them: each version is served as a tool whose JSON schema is the input the vendor
documents for it (the action list of the version, ``coordinate`` as ``[x, y]``,
``scroll_direction``/``scroll_amount``, ``region`` for zoom, the editor's commands), with
the display size in its description, rendered into the prompt like any other tool. A
call comes back as a ``tool_use`` block of that name whose ``input`` is the arguments the
model wrote, which is the vendor's shape because the schema is.

Sources: the Messages API tool types (``BetaToolComputerUse20250124Param`` and siblings
in the ``anthropic`` SDK), the computer use and text editor tool guides
(https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/computer-use-tool,
…/text-editor-tool, …/bash-tool) and Anthropic's reference loop (computer-use-demo).
The descriptions are this gateway's own words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from openforge.conversation import ToolSpec
from openforge.dialects.anthropic.protocol import DefinedTool
from openforge.dialects.errors import ApiError

__all__ = ["VERSIONS", "DefinedVersion", "defined_spec"]

Family = Literal["computer", "bash", "text_editor"]


@dataclass(frozen=True, slots=True)
class DefinedVersion:
    """One served tool version: its family, the name the API requires, and the options
    (beyond the display size every computer version needs) that it accepts."""

    family: Family
    name: str
    options: frozenset[str] = frozenset()


VERSIONS: dict[str, DefinedVersion] = {
    "computer_20241022": DefinedVersion("computer", "computer", frozenset({"display_number"})),
    "computer_20250124": DefinedVersion("computer", "computer", frozenset({"display_number"})),
    "computer_20251124": DefinedVersion(
        "computer", "computer", frozenset({"display_number", "enable_zoom"})
    ),
    "bash_20241022": DefinedVersion("bash", "bash"),
    "bash_20250124": DefinedVersion("bash", "bash"),
    "text_editor_20241022": DefinedVersion("text_editor", "str_replace_editor"),
    "text_editor_20250124": DefinedVersion("text_editor", "str_replace_editor"),
    "text_editor_20250429": DefinedVersion("text_editor", "str_replace_based_edit_tool"),
    "text_editor_20250728": DefinedVersion(
        "text_editor", "str_replace_based_edit_tool", frozenset({"max_characters"})
    ),
}

_OPTIONS = ("display_number", "enable_zoom", "max_characters")

_POINT = {
    "type": "array",
    "items": {"type": "integer"},
    "minItems": 2,
    "maxItems": 2,
}

# Actions in the order the vendor lists them; each later version adds to the one before.
_ACTIONS_20241022 = (
    "key",
    "type",
    "mouse_move",
    "left_click",
    "left_click_drag",
    "right_click",
    "middle_click",
    "double_click",
    "screenshot",
    "cursor_position",
)
_ACTIONS_20250124 = (
    *_ACTIONS_20241022,
    "left_mouse_down",
    "left_mouse_up",
    "scroll",
    "hold_key",
    "wait",
    "triple_click",
)

_ACTION_HELP = {
    "key": "press a key or key combination (xdotool syntax: `Return`, `ctrl+s`, `alt+Tab`)",
    "type": "type the string `text`",
    "mouse_move": "move the pointer to `coordinate`",
    "left_click": "click the left button",
    "left_click_drag": "press the left button and drag the pointer to `coordinate`",  # 2024
    "right_click": "click the right button",
    "middle_click": "click the middle button",
    "double_click": "double-click the left button",
    "screenshot": "capture the screen",
    "cursor_position": "report the pointer's current (x, y)",
    "left_mouse_down": "press the left button and keep it down",
    "left_mouse_up": "release the left button",
    "scroll": "turn the wheel `scroll_amount` notches towards `scroll_direction`",
    "hold_key": "hold the key(s) in `text` down for `duration` seconds",
    "wait": "do nothing for `duration` seconds",
    "triple_click": "triple-click the left button",
    "zoom": "capture only `region` of the screen, enlarged, to read small details",
}


def _help(action: str, kind: str) -> str:
    if action == "left_click_drag" and kind != "computer_20241022":
        return "press the left button at `start_coordinate` and drag to `coordinate`"
    return _ACTION_HELP[action]


def defined_spec(tool: DefinedTool, where: str) -> ToolSpec:
    """The tool ``tool`` is served as; ``where`` is its JSON path (``tools[2]``).

    Refused as Anthropic refuses them (its wording, naming the field): a version this
    gateway does not know (a future ``computer_29990101``), a name other than the one the
    version requires, a computer without its display size, an option the version lacks.
    """
    version = VERSIONS.get(tool.type)
    at = f"{where.replace('[', '.').replace(']', '')}.{tool.type}"
    if version is None:
        family = tool.type.rsplit("_", 1)[0]
        known = ", ".join(f"'{k}'" for k, v in VERSIONS.items() if v.family == family)
        raise ApiError(
            "invalid_request",
            f"{at}: unknown tool type '{tool.type}': this gateway serves the {family} "
            f"tool versions {known}.",
            f"{where}.type",
        )
    if tool.name != version.name:
        raise ApiError(
            "invalid_request", f"{at}.name: Input should be '{version.name}'", f"{where}.name"
        )
    for option in _OPTIONS:
        if getattr(tool, option) is not None and option not in version.options:
            raise ApiError(
                "invalid_request",
                f"{at}.{option}: Extra inputs are not permitted",
                f"{where}.{option}",
            )
    if version.family == "computer":
        return _computer(tool, at, where)
    if version.family == "bash":
        return _bash(tool.name)
    return _text_editor(tool)


def _computer(tool: DefinedTool, at: str, where: str) -> ToolSpec:
    width, height = tool.display_width_px, tool.display_height_px
    for field, value in (("display_width_px", width), ("display_height_px", height)):
        if value is None:
            raise ApiError("invalid_request", f"{at}.{field}: Field required", f"{where}.{field}")
    actions: tuple[str, ...] = _ACTIONS_20241022
    if tool.type != "computer_20241022":
        actions = _ACTIONS_20250124
    zoom = tool.type == "computer_20251124" and bool(tool.enable_zoom)
    if zoom:
        actions += ("zoom",)
    screen = f"The screen is {width}x{height} pixels"
    if tool.display_number is not None:
        screen += f" (X11 display :{tool.display_number})"
    description = (
        "Use a mouse and keyboard to control a computer's desktop, and take screenshots. "
        f"{screen}; coordinates are pixels from its top-left corner. Look at a screenshot "
        "before clicking, and aim for the centre of what you click. Actions: "
        + "; ".join(f"`{a}`: {_help(a, tool.type)}" for a in actions)
        + "."
    )
    props: dict[str, Any] = {
        "action": {"type": "string", "enum": list(actions), "description": "The action."},
        "coordinate": {
            **_POINT,
            "description": "(x, y): where the action happens, in pixels from the left "
            "and top edges.",
        },
        "text": {
            "type": "string",
            "description": "The text to type, or the key(s) for `key` and `hold_key`."
            if tool.type == "computer_20241022"
            else "The text to type, the key(s) for `key` and `hold_key`, or keys to hold "
            "down during a click or scroll.",
        },
    }
    if tool.type != "computer_20241022":
        props |= {
            "start_coordinate": {
                **_POINT,
                "description": "(x, y): where `left_click_drag` starts.",
            },
            "scroll_direction": {
                "type": "string",
                "enum": ["up", "down", "left", "right"],
                "description": "Which way `scroll` turns the wheel.",
            },
            "scroll_amount": {
                "type": "integer",
                "minimum": 0,
                "description": "How many wheel notches `scroll` turns.",
            },
            "duration": {
                "type": "number",
                "minimum": 0,
                "maximum": 100,
                "description": "Seconds, for `hold_key` and `wait`.",
            },
        }
    if zoom:
        props["region"] = {
            "type": "array",
            "items": {"type": "integer"},
            "minItems": 4,
            "maxItems": 4,
            "description": "(x0, y0, x1, y1): the corners of the area `zoom` captures.",
        }
    schema = {"type": "object", "properties": props, "required": ["action"]}
    return ToolSpec(tool.name, description, schema)


def _bash(name: str) -> ToolSpec:
    description = (
        "Run a command in a bash shell that stays open between calls (state such as the "
        "working directory and variables persists). Avoid commands that wait for input "
        "or print without end; run long-lived programs in the background. Set `restart` "
        "to start a fresh shell."
    )
    schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command to run."},
            "restart": {"type": "boolean", "description": "Restart the shell."},
        },
    }
    return ToolSpec(name, description, schema)


def _text_editor(tool: DefinedTool) -> ToolSpec:
    commands = ["view", "create", "str_replace", "insert"]
    if tool.name == "str_replace_editor":  # the 2024-10 and 2025-01 versions only
        commands.append("undo_edit")
    description = (
        "View, create and edit text files. `view` shows a file with line numbers (or "
        "lists a directory); `create` writes a new file; `str_replace` replaces the one "
        "exact occurrence of `old_str` with `new_str`; `insert` puts `new_str` after line "
        "`insert_line`"
        + ("; `undo_edit` reverts the last edit of `path`." if "undo_edit" in commands else ".")
    )
    if tool.max_characters is not None:
        description += f" `view` shows at most {tool.max_characters} characters."
    props: dict[str, Any] = {
        "command": {"type": "string", "enum": commands, "description": "The command."},
        "path": {"type": "string", "description": "Absolute path of the file or directory."},
        "file_text": {"type": "string", "description": "For `create`: the file's content."},
        "old_str": {"type": "string", "description": "For `str_replace`: the text to replace."},
        "new_str": {
            "type": "string",
            "description": "For `str_replace`: the replacement; for `insert`: the text to insert.",
        },
        "insert_line": {
            "type": "integer",
            "minimum": 0,
            "description": "For `insert`: the line after which to insert (0: the top).",
        },
        "view_range": {
            **_POINT,
            "description": "For `view`: [first, last] line, 1-based; last -1 reads to the end.",
        },
    }
    schema = {"type": "object", "properties": props, "required": ["command", "path"]}
    return ToolSpec(tool.name, description, schema)
