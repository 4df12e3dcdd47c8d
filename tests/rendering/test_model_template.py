"""The model's-own-template path, on a copy of SmolLM2's tokenizer given a tool template."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openforge.conversation import Conversation, Message, TextPart, ToolCall, ToolSpec
from openforge.rendering import Renderer, load_tokenizer

from .conftest import SMOLLM2

# A ChatML template that renders tools (written for this test in the Qwen style).
TOOL_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}Tools:
<tools>
{% for t in tools %}{{ t | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' and loop.first %}
{%- elif m.role == 'assistant' %}<|im_start|>assistant
{{ m.content }}
{%- for c in m.tool_calls | default([]) %}
<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>
{%- endfor %}
{%- if not (loop.last and continue_final_message) %}<|im_end|>
{% endif %}
{%- elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


@pytest.fixture(scope="module")
def qwen_like(tmp_path_factory: pytest.TempPathFactory) -> Renderer:
    if not (SMOLLM2 / "tokenizer.json").is_file():
        pytest.fail(f"{SMOLLM2} is missing: the setup script pulls it")
    d = tmp_path_factory.mktemp("qwen-like")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(SMOLLM2 / name, d / name)
    (d / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    tok = load_tokenizer(Path(d))
    assert tok.template_handles_tools
    return Renderer(tok)


TOOLS = [ToolSpec("run", "Run a command.", {"type": "object", "properties": {"cmd": {}}})]


def test_detected_and_rendered_through_the_template(qwen_like: Renderer) -> None:
    assert qwen_like.uses_model_template
    conv = Conversation(
        messages=[Message("system", [TextPart("Sys.")]), Message("user", [TextPart("hi")])],
        tools=TOOLS,
    )
    text = qwen_like.tokenizer._template.decode(
        qwen_like.render(conv).ids, skip_special_tokens=False
    )
    assert text.startswith("<|im_start|>system\nSys.\n\nTools:\n<tools>\n{")
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_template_path_extends_prompt_and_output_and_forks_on_edit(qwen_like: Renderer) -> None:
    conv = Conversation(messages=[Message("user", [TextPart("list files")])], tools=TOOLS)
    history = qwen_like.new_history()
    prev: list[int] | None = None
    for turn in range(4):
        prompt = qwen_like.render(conv, history)
        if prev is not None:
            assert prompt.ids[: len(prev)] == prev
            assert not prompt.fork and prompt.parent == turn - 1
        # Hermes-style output with newlines (the parser accepts either spacing).
        call = json.dumps({"name": "run", "arguments": {"cmd": f"ls {turn}"}})
        raw = f"Step {turn}.\n<tool_call>\n{call}\n</tool_call>"
        out = [*qwen_like.tokenizer.encode(raw), qwen_like.end_id]
        parsed = qwen_like.parse(out)
        assert [json.loads(c.arguments) for c in parsed.tool_calls] == [{"cmd": f"ls {turn}"}]
        msg = Message("assistant", [TextPart(parsed.text)], tool_calls=parsed.tool_calls)
        history.record(prompt, out, msg)
        prev = prompt.ids + out
        calls = [ToolCall(f"h{turn}", "run", json.dumps({"cmd": f"ls {turn}"}))]
        conv.messages += [
            Message("assistant", [TextPart(parsed.text)], tool_calls=calls),
            Message("tool", [TextPart(f"out {turn}")], tool_call_id=f"h{turn}"),
        ]
    conv.messages[0] = Message("user", [TextPart("list all files")])
    edited = qwen_like.render(conv, history)
    assert edited.fork and edited.fork_reason
