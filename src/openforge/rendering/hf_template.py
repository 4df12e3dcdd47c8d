"""Models whose own chat template renders tools (Qwen-style ``apply_chat_template(tools=...)``).

Simpler than the OpenForge template path: the text is rendered by the model's template and
tokenized per call (no segment cache). Replies sampled earlier in the rollout are still
spliced in as their recorded ids: the template's text for ``messages[:i]`` with a
generation prompt, then the sampled ids, then the text after that turn's end-of-turn
token. A template that does not render earlier turns as a prefix of later prompts (one
that drops old reasoning, say) falls back to plain text and the call is a fork.
"""

from __future__ import annotations

import json
from typing import Any

from openforge.conversation import Conversation, Message
from openforge.rendering.history import RenderedPrompt, RolloutHistory, Segment
from openforge.rendering.tokenizer import Tokenizer
from openforge.rendering.toolformat import content_text
from openforge.rendering.untracked import untracked

__all__ = ["TemplateRenderer", "hf_messages"]


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def hf_messages(conv: Conversation) -> tuple[list[dict[str, Any]], int]:
    """The conversation as HF chat-template message dicts, and how many images were dropped."""
    out: list[dict[str, Any]] = []
    images = 0
    for m in conv.messages:
        text, n = content_text(m.content)
        images += n
        role = "system" if m.role == "developer" else m.role
        item: dict[str, Any] = {"role": role, "content": text}
        if m.role == "assistant":
            if m.tool_calls:
                item["tool_calls"] = [
                    {
                        "type": "function",
                        "id": c.id,
                        "function": {"name": c.name, "arguments": _arguments(c.arguments)},
                    }
                    for c in m.tool_calls
                ]
            if m.reasoning is not None:
                item["reasoning_content"] = m.reasoning
        if m.role == "tool" and m.tool_call_id is not None:
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out, images


class TemplateRenderer:
    """Prompt rendering through the model's own chat template (see the module docstring)."""

    def __init__(
        self, tokenizer: Tokenizer, turn_ends: tuple[str, ...] = (), rerenders: str | None = None
    ) -> None:
        """``turn_ends``: the texts of the tokens that may close an assistant turn in the
        template's text (default: eos; Harmony's <|call|>, say). ``rerenders``: why the
        model family's template re-renders earlier turns, for the fork reason."""
        self.tokenizer = tokenizer
        self.turn_ends = turn_ends or (tokenizer.eos_text,)
        self.rerenders = rerenders

    def _text(
        self, msgs: list[dict[str, Any]], tools: Any, k: int, gen: bool, cont: bool = False
    ) -> str:
        text = self.tokenizer.hf.apply_chat_template(
            msgs[:k],
            tools=tools,
            tokenize=False,
            add_generation_prompt=gen,
            continue_final_message=cont,
        )
        return str(text)

    def render(
        self, conv: Conversation, history: RolloutHistory | None, *, prefill: bool
    ) -> RenderedPrompt:
        """Render ``conv``; splice in recorded replies where the template allows it."""
        msgs, images = hf_messages(conv)
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in conv.tools
        ] or None
        final = self._text(msgs, tools, len(msgs), gen=not prefill, cont=prefill)
        out = RenderedPrompt(ids=[], images=images)
        spliced = self._splice(conv.messages, msgs, tools, final, history, out)
        if spliced is None:
            out.ids = untracked(self.tokenizer.encode_template(final))
            out.reused_tokens, out.parent = 0, None
        key = ("prompt", untracked(tuple(out.ids)))
        out.segments = [Segment(key, out.ids, 0, "template", True)]
        if history is not None and history.calls and out.parent is None:
            out.fork = True
            out.fork_reason = (
                "the prompt does not extend an earlier call's prompt and reply"
                if spliced is not None
                else "the chat template does not render earlier turns as a prefix"
                + (f" ({self.rerenders})" if self.rerenders else "")
            )
        return out

    def _splice(
        self,
        messages: list[Message],
        msgs: list[dict[str, Any]],
        tools: Any,
        final: str,
        history: RolloutHistory | None,
        out: RenderedPrompt,
    ) -> list[int] | None:
        if history is None or not history.calls:
            return None
        ids: list[int] = untracked([])
        consumed = ""
        for i, m in enumerate(messages[:-1]):
            turn = history.find_turn(m, 0) if m.role == "assistant" else None
            if turn is None:
                continue
            head = self._text(msgs, tools, i, gen=True)
            closed = self._text(msgs, tools, i + 1, gen=False)
            end, eos = max((closed.rfind(t, len(head)), t) for t in self.turn_ends)
            if not head.startswith(consumed) or not closed.startswith(head) or end < 0:
                return None
            ids += self.tokenizer.encode_template(head[len(consumed) :])
            prev = history.calls[turn.index].keys[0]
            if isinstance(prev, tuple) and prev[1] == tuple(ids):
                out.parent = turn.index
            ids += turn.segment_ids
            out.reused_tokens += len(turn.segment_ids)
            consumed = closed[: end + len(eos)]
        if not final.startswith(consumed):
            return None
        ids += self.tokenizer.encode_template(final[len(consumed) :])
        out.ids = ids
        return ids
