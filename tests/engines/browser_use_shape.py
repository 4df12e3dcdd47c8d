"""A request in Browser-Use's shape, written here (no Browser-Use code or files): a ~24 KB
system prompt, a screenshot, and a strict ~16 KB JSON schema of its AgentOutput layout
(thinking, evaluation, memory, next goal, and a list of actions, each an object with one
key naming the action). Free-text fields carry a ``maxLength`` so that a randomly
initialised model, which rarely closes a string on its own, finishes within a test's budget.
"""

from __future__ import annotations

from typing import Any

TEXT = {"type": "string", "maxLength": 24}

ACTIONS: dict[str, dict[str, Any]] = {
    "done": {"text": TEXT, "success": {"type": "boolean"}},
    "search_google": {"query": TEXT},
    "go_to_url": {"url": TEXT, "new_tab": {"type": "boolean"}},
    "go_back": {},
    "wait": {"seconds": {"type": "integer"}},
    "click_element_by_index": {
        "index": {"type": "integer", "minimum": 1},
        "while_holding_ctrl": {"type": "boolean"},
    },
    "input_text": {
        "index": {"type": "integer", "minimum": 0},
        "text": TEXT,
        "clear_existing": {"type": "boolean"},
    },
    "upload_file_to_element": {"index": {"type": "integer", "minimum": 1}, "path": TEXT},
    "switch_tab": {"tab_id": {"type": "string", "minLength": 4, "maxLength": 4}},
    "close_tab": {"tab_id": {"type": "string", "minLength": 4, "maxLength": 4}},
    "extract_structured_data": {"query": TEXT, "extract_links": {"type": "boolean"}},
    "scroll": {
        "down": {"type": "boolean"},
        "num_pages": {"type": "number"},
        "frame_element_index": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
    "send_keys": {"keys": TEXT},
    "scroll_to_text": {"text": TEXT},
    "write_file": {"file_name": TEXT, "content": TEXT, "append": {"type": "boolean"}},
    "replace_file_str": {"file_name": TEXT, "old_str": TEXT, "new_str": TEXT},
    "read_file": {"file_name": TEXT},
    "get_dropdown_options": {"index": {"type": "integer", "minimum": 1}},
    "select_dropdown_option": {"index": {"type": "integer", "minimum": 1}, "text": TEXT},
}


def agent_output_schema() -> dict[str, Any]:
    variants = []
    for name, params in ACTIONS.items():
        inner = {
            "type": "object",
            "description": f"Parameters of the {name} action. " + "Use it as documented. " * 8,
            "properties": {
                k: {**v, "description": f"The {k} of {name}."} for k, v in params.items()
            },
            "required": list(params),
            "additionalProperties": False,
        }
        variants.append(
            {
                "type": "object",
                "properties": {name: inner},
                "required": [name],
                "additionalProperties": False,
                "description": f"Action {name}: " + "performs the step in the browser. " * 6,
            }
        )
    return {
        "type": "object",
        "properties": {
            "thinking": TEXT,
            "evaluation_previous_goal": TEXT,
            "memory": TEXT,
            "next_goal": TEXT,
            "action": {"type": "array", "items": {"anyOf": variants}, "minItems": 1, "maxItems": 3},
        },
        "required": ["thinking", "evaluation_previous_goal", "memory", "next_goal", "action"],
        "additionalProperties": False,
    }


def system_prompt() -> str:
    rules = [
        "You are an AI agent designed to operate in an iterative loop to automate browser tasks.",
        "<browser_rules>Only interact with elements that have a numeric [index] assigned."
        "</browser_rules>",
        "<file_system>You have access to a persistent file system to track progress.</file_system>",
        "<task_completion_rules>Call the done action when the task is complete."
        "</task_completion_rules>",
        "<output>You must ALWAYS respond with valid JSON in the exact format given.</output>",
    ]
    text = "\n".join(rules) + "\n"
    n = 0
    while len(text) < 24_000:
        n += 1
        text += (
            f"Rule {n}: read the screenshot and the interactive elements before you act; "
            "prefer the element index shown in the list; never guess a URL.\n"
        )
    return text
