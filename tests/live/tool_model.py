"""A model directory whose own chat template renders tools: SmolLM2-135M's weights and
tokenizer with a template written here in the shape Qwen2.5 and Hermes publish (tool
signatures as JSON lines within ``<tools></tools>`` in the system turn, calls as
``<tool_call>`` JSON, a run of tool results as one user turn of ``<tool_response>`` blocks).

OpenForge renders such a model through its own template (``rendering/hf_template.py``),
so the live server, which serves this directory, can check OpenForge's prompt ids against
the ids vLLM renders itself for the same messages. The weights are SmolLM2's, linked, so
everything else the live tests ask of the server is unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["TOOL_TEMPLATE", "build_tool_model"]

# Written for this test in the published shape (not taken from any model's files).
# HF and vLLM both compile templates with trim_blocks and lstrip_blocks; every newline
# this one emits is an explicit string.
TOOL_TEMPLATE = r"""
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = messages[0].content -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = 'You are a helpful assistant.' -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- if tools -%}
  {%- set ns = namespace(text=system ~ '\n\n# Tools\n\nFunctions you may call, one JSON '
      ~ 'signature per line within <tools></tools>:\n<tools>') -%}
  {%- for tool in tools -%}
    {%- set ns.text = ns.text ~ '\n' ~ (tool | tojson) -%}
  {%- endfor -%}
  {%- set system = ns.text ~ '\n</tools>\n\nTo call a function, reply with a JSON object '
      ~ 'of its name and arguments within <tool_call></tool_call> tags:\n<tool_call>\n'
      ~ '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' -%}
{%- endif -%}
{{- '<|im_start|>system\n' ~ system ~ '<|im_end|>\n' -}}
{%- for m in turns -%}
  {%- if m.role == 'tool' -%}
    {%- if loop.first or loop.previtem.role != 'tool' -%}
      {{- '<|im_start|>user' -}}
    {%- endif -%}
    {{- '\n<tool_response>\n' ~ m.content ~ '\n</tool_response>' -}}
    {%- if loop.last or loop.nextitem.role != 'tool' -%}
      {{- '<|im_end|>\n' -}}
    {%- endif -%}
  {%- elif m.role == 'assistant' -%}
    {{- '<|im_start|>assistant' -}}
    {%- if m.content -%}
      {{- '\n' ~ m.content -}}
    {%- endif -%}
    {%- for call in m.tool_calls or [] -%}
      {%- set f = call.function if call.function is defined else call -%}
      {%- set args = f.arguments if f.arguments is string else (f.arguments | tojson) -%}
      {{- '\n<tool_call>\n{"name": "' ~ f.name ~ '", "arguments": ' ~ args ~ '}\n</tool_call>' -}}
    {%- endfor -%}
    {{- '<|im_end|>\n' -}}
  {%- else -%}
    {{- '<|im_start|>' ~ m.role ~ '\n' ~ m.content ~ '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()

# What the directory shares with SmolLM2's (linked, not copied: the weights are 0.5 GB).
_LINKED = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json")


def build_tool_model(smollm2: Path, target: Path) -> Path:
    """``target`` made a model directory of SmolLM2's files (``smollm2``) with the tool
    template; returns it."""
    target.mkdir(parents=True, exist_ok=True)
    for name in _LINKED:
        link = target / name
        if not link.exists():
            link.symlink_to((smollm2 / name).resolve())
    config = json.loads((smollm2 / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # chat_template.jinja is the one read
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (target / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    return target
