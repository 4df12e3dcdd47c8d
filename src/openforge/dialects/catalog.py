"""The wire formats the gateway serves, in a fixed order."""

from __future__ import annotations

from openforge.dialects import anthropic, openai_chat, openai_responses
from openforge.dialects.dialect import Dialect

__all__ = ["DIALECTS"]

DIALECTS: tuple[Dialect, ...] = (openai_chat.DIALECT, openai_responses.DIALECT, anthropic.DIALECT)
