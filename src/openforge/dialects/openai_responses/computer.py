"""Responses computer use: the ``computer_use_preview`` and ``computer`` tools and
``computer_call`` items.

OpenAI's computer-use model knows the tool from its type alone; a policy under training
is shown it as a tool named :data:`COMPUTER` whose arguments are the vendor's action
object (``{"type": "click", "button": "left", "x": 10, "y": 20}``: click, double_click,
drag, keypress, move, screenshot, scroll, type, wait, with the fields each one has), the
display size and environment in its description. A call of it is answered as a
``computer_call`` item carrying that object as its ``action``; the harness runs it and
sends a ``computer_call_output`` whose screenshot becomes the tool result the model sees.
The ``computer`` tool (no options) takes a batch instead: its arguments are
``{"actions": [<action>, …]}``, answered as a ``computer_call`` with ``actions``.

Sources: the Responses API reference (``computer_use_preview`` tool, ``computer_call``
and ``computer_call_output`` items), the ``openai`` SDK's ``ResponseComputerToolCall``
and the computer use guide (https://platform.openai.com/docs/guides/tools-computer-use).
No safety classifier runs here, so ``pending_safety_checks`` is always empty.
"""

from __future__ import annotations

from typing import Any

import orjson

from openforge.conversation import ToolSpec
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_responses.protocol import (
    ComputerCallItem,
    ComputerTool,
    ComputerUsePreviewTool,
)

__all__ = [
    "COMPUTER",
    "METADATA_KEY",
    "action_arguments",
    "call_action",
    "computer_spec",
    "is_batch",
]

# The name the computer tool has in the prompt, and the Conversation.metadata key under
# which a request that offers it keeps its declaration (echoed back in the response).
COMPUTER = "computer"
METADATA_KEY = "computer_use"

_INT = {"type": "integer"}
_ACTIONS = {
    "click": "click `button` at (`x`, `y`)",
    "double_click": "double-click at (`x`, `y`)",
    "drag": "hold the left button along `path`, a list of {x, y} points",
    "keypress": 'press the keys in `keys` together (`["CTRL", "L"]`)',
    "move": "move the pointer to (`x`, `y`)",
    "screenshot": "look at the screen",
    "scroll": "scroll by (`scroll_x`, `scroll_y`) pixels with the pointer at (`x`, `y`)",
    "type": "type `text`",
    "wait": "wait a moment for the screen to change",
}


def computer_spec(tool: ComputerUsePreviewTool | ComputerTool) -> ToolSpec:
    """The tool ``computer_use_preview`` (one action per call) or ``computer`` (a batch
    of actions per call) is shown to the model as."""
    action: dict[str, Any] = {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(_ACTIONS), "description": "The action."},
            "button": {
                "type": "string",
                "enum": ["left", "right", "wheel", "back", "forward"],
                "description": "For `click`: which mouse button.",
            },
            "x": {**_INT, "description": "Pixels from the left edge."},
            "y": {**_INT, "description": "Pixels from the top edge."},
            "scroll_x": {**_INT, "description": "For `scroll`: horizontal distance."},
            "scroll_y": {**_INT, "description": "For `scroll`: vertical distance."},
            "keys": {"type": "array", "items": {"type": "string"}, "description": "Key names."},
            "path": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"x": _INT, "y": _INT},
                    "required": ["x", "y"],
                },
                "description": "For `drag`: the points the pointer passes, first to last.",
            },
            "text": {"type": "string", "description": "For `type`: the text."},
        },
        "required": ["type"],
    }
    actions = (
        "Actions (`type`): "
        + "; ".join(f"`{k}`: {v}" for k, v in _ACTIONS.items())
        + ". `keys` also lists keys held during a click, move, drag or scroll."
    )
    if isinstance(tool, ComputerTool):
        description = (
            "Operate a computer through its screen, pointer and keyboard; x and y are "
            "pixels from the top-left corner of the latest screenshot. Each call performs "
            "`actions`, a list of actions done in order; a screenshot of the result comes "
            "back. " + actions
        )
        schema = {
            "type": "object",
            "properties": {"actions": {"type": "array", "items": action, "minItems": 1}},
            "required": ["actions"],
        }
        return ToolSpec(COMPUTER, description, schema)
    description = (
        f"Operate a computer ({tool.environment}) through its screen, pointer and keyboard. "
        f"The display is {tool.display_width}x{tool.display_height} pixels; x and y count "
        "from its top-left corner. Each call performs one action, given as the arguments; "
        "a screenshot of the result comes back. " + actions
    )
    return ToolSpec(COMPUTER, description, action)


def is_batch(declaration: dict[str, Any]) -> bool:
    """Whether the declared computer tool (as kept in metadata) takes batches."""
    return declaration.get("type") == "computer"


def action_arguments(item: ComputerCallItem, where: str) -> str:
    """A ``computer_call`` item's action (or batch) as the arguments the model wrote.

    Fields the SDK fills with null when a harness dumps its parsed item (``keys``) are
    left out: the model never wrote them, and the history must read as it was sampled.
    """
    if item.actions is not None:
        batch = [{k: v for k, v in a.items() if v is not None} for a in item.actions]
        return orjson.dumps({"actions": batch}).decode()
    if item.action is None:
        raise ApiError(
            "invalid_request",
            f"Missing required parameter: '{where}.action' (or '{where}.actions').",
            f"{where}.action",
        )
    return orjson.dumps({k: v for k, v in item.action.items() if v is not None}).decode()


def call_action(arguments: str) -> dict[str, Any]:
    """The ``action`` of the ``computer_call`` answering a call with ``arguments``.

    Text that is not a JSON object (a model mistake) becomes ``{}``: the harness reports
    an action it cannot run, never a crash here.
    """
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
