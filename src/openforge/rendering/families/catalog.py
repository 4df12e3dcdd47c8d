"""The model families OpenForge renders and parses, in detection order.

A model directory picks the first family whose ``detect`` accepts it (its chat template's
markers, its added tokens, ``config.json``'s ``model_type``); Hermes is last and takes any
model, including those whose template knows no tools (they are rendered through OpenForge's
own Hermes-style tool template). ``--tool-format NAME`` / ``--reasoning-format NAME`` on
``openforge gateway`` override the detected formats, as vLLM's ``--tool-call-parser`` and
``--reasoning-parser`` do. Adding a family is one module and one entry here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from openforge.rendering.families.family import ModelFacts, ModelFamily, ReasoningFormat, ToolFormat
from openforge.rendering.families.harmony import HARMONY, HARMONY_REASONING
from openforge.rendering.families.hermes import HERMES, THINK
from openforge.rendering.families.jsoncalls import DEEPSEEK_V31, KIMI_K2, LLAMA3_JSON, MISTRAL
from openforge.rendering.families.xmlcalls import GLM45, GLM47, QWEN3_CODER
from openforge.rendering.tokenizer import Tokenizer

__all__ = [
    "FAMILIES",
    "REASONING_FORMATS",
    "TOOL_FORMATS",
    "FamilyError",
    "detect_family",
    "model_facts",
    "resolve_family",
]


class FamilyError(ValueError):
    """An unknown format name (the message lists the known ones)."""


_GLM_THINK = ReasoningFormat("glm45", "<think>", "</think>", "", "", "\n", vllm="glm45")
_DEEPSEEK_THINK = ReasoningFormat(
    "deepseek_v3", "<think>", "</think>", "", "", "", vllm="deepseek_v3"
)
_KIMI_THINK = ReasoningFormat("kimi_k2", "<think>", "</think>", "", "", "", vllm="kimi_k2")
_MISTRAL_THINK = ReasoningFormat("mistral", "[THINK]", "[/THINK]", "", "", "", vllm="mistral")


def _glm45_newlines(facts: ModelFacts) -> bool:
    """GLM-4.5's template puts each <arg_key> on its own line (as a newline or a "\\n" in a
    string literal); GLM-4.7's writes them back to back."""
    return "\n<arg_key>" in facts.chat_template or "\\n<arg_key>" in facts.chat_template


_DROPS_OLD_THINKING = "its chat template drops the reasoning of turns before the last user message"

FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily(
        name="gpt_oss",
        title="gpt-oss (Harmony)",
        tools=HARMONY,
        reasoning=HARMONY_REASONING,
        detect=lambda f: f.model_type == "gpt_oss" or f.has("<|channel|>", "<|message|>"),
        rerenders="its chat template drops earlier turns' analysis (reasoning) and writes a "
        "finished answer's <|return|> as <|end|>",
        stop_tokens=("<|return|>", "<|call|>"),
        call_end="<|call|>",
    ),
    ModelFamily(
        name="kimi_k2",
        title="Kimi K2 / K2 Thinking",
        tools=KIMI_K2,
        reasoning=_KIMI_THINK,
        detect=lambda f: f.has("<|tool_calls_section_begin|>"),
        stop_tokens=("<|im_end|>",),
    ),
    ModelFamily(
        name="deepseek_v31",
        title="DeepSeek V3.1 / V3.2 (chat template)",
        tools=DEEPSEEK_V31,
        reasoning=_DEEPSEEK_THINK,
        detect=lambda f: f.has("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"),
        rerenders="its chat template writes earlier assistant turns without their reasoning",
        stop_tokens=("<｜end▁of▁sentence｜>",),
    ),
    ModelFamily(
        name="glm47",
        title="GLM-4.7",
        tools=GLM47,
        reasoning=_GLM_THINK,
        detect=lambda f: "<arg_key>" in f.chat_template and not _glm45_newlines(f),
        rerenders=_DROPS_OLD_THINKING,
        stop_tokens=("<|user|>", "<|observation|>", "<|endoftext|>"),
    ),
    ModelFamily(
        name="glm45",
        title="GLM-4.5 / 4.6",
        tools=GLM45,
        reasoning=_GLM_THINK,
        detect=lambda f: "<arg_key>" in f.chat_template,
        rerenders=_DROPS_OLD_THINKING,
        stop_tokens=("<|user|>", "<|observation|>", "<|endoftext|>"),
    ),
    ModelFamily(
        name="qwen3_coder",
        title="Qwen3-Coder, Qwen3.5 / Qwen3-Next (XML calls)",
        tools=QWEN3_CODER,
        reasoning=THINK,
        detect=lambda f: "<function=" in f.chat_template and "<parameter=" in f.chat_template,
        stop_tokens=("<|im_end|>",),
    ),
    ModelFamily(
        name="mistral",
        title="Mistral / Magistral / Devstral",
        tools=MISTRAL,
        reasoning=_MISTRAL_THINK,
        detect=lambda f: f.has("[TOOL_CALLS]"),
    ),
    ModelFamily(
        name="llama3_json",
        title="Llama 3.1 / 3.2 / 3.3 (JSON calls)",
        tools=LLAMA3_JSON,
        reasoning=None,
        detect=lambda f: f.has("<|eot_id|>") and "tools" in f.chat_template,
        stop_tokens=("<|eot_id|>", "<|eom_id|>"),
    ),
    ModelFamily(
        name="qwen3",
        title="Qwen3 (Hermes calls, <think> reasoning)",
        tools=HERMES,
        reasoning=THINK,
        detect=lambda f: f.has("<tool_call>", "<think>") and "reasoning_content" in f.chat_template,
        rerenders=_DROPS_OLD_THINKING,
    ),
    ModelFamily(
        name="hermes",
        title="Hermes / Qwen2.5 / any model without a tool template (OpenForge's own)",
        tools=HERMES,
        reasoning=THINK,
        detect=lambda f: True,
    ),
)

TOOL_FORMATS: dict[str, ToolFormat] = {}
REASONING_FORMATS: dict[str, ReasoningFormat | None] = {"none": None}
for _family in FAMILIES:
    TOOL_FORMATS.setdefault(_family.tools.name, _family.tools)
    if _family.reasoning is not None:
        REASONING_FORMATS.setdefault(_family.reasoning.name, _family.reasoning)


def model_facts(tokenizer: Tokenizer) -> ModelFacts:
    """What ``tokenizer``'s model directory says about its family."""
    config: dict[str, object] = {}
    path = Path(tokenizer.path) / "config.json"
    if path.is_file():
        try:
            loaded = json.loads(path.read_text())
        except ValueError:
            loaded = {}
        config = loaded if isinstance(loaded, dict) else {}
    archs = config.get("architectures")
    return ModelFacts(
        chat_template=tokenizer.chat_template or "",
        model_type=str(config.get("model_type") or ""),
        architectures=tuple(str(a) for a in archs) if isinstance(archs, list) else (),
        vocab=tokenizer.added_tokens,
    )


def detect_family(facts: ModelFacts) -> ModelFamily:
    """The first family in :data:`FAMILIES` that recognises the model."""
    return next(f for f in FAMILIES if f.detect(facts))


def resolve_family(
    tokenizer: Tokenizer, tool_format: str | None = None, reasoning_format: str | None = None
) -> ModelFamily:
    """The model's family, with the named formats in place of the detected ones."""
    family = detect_family(model_facts(tokenizer))
    if tool_format is not None:
        if tool_format not in TOOL_FORMATS:
            known = ", ".join(TOOL_FORMATS)
            raise FamilyError(f"unknown tool format {tool_format!r} (known: {known})")
        named = next((f for f in FAMILIES if f.tools.name == tool_format), family)
        family = dataclasses.replace(
            named, detect=family.detect, reasoning=family.reasoning, rerenders=family.rerenders
        )
    if reasoning_format is not None:
        if reasoning_format not in REASONING_FORMATS:
            known = ", ".join(REASONING_FORMATS)
            raise FamilyError(f"unknown reasoning format {reasoning_format!r} (known: {known})")
        family = dataclasses.replace(family, reasoning=REASONING_FORMATS[reasoning_format])
    return family
