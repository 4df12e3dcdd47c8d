"""Who is calling: the rollout key a request carries and the harness identity it shows."""

from __future__ import annotations

from typing import Any

from starlette.types import Scope

__all__ = ["harness_identity", "rollout_key"]

# Headers that identify a harness and its version (beside every x-stainless-* header).
_IDENTITY = frozenset(
    {
        b"user-agent",
        b"anthropic-beta",
        b"anthropic-version",
        b"anthropic-dangerous-direct-browser-access",
        b"x-app",
        b"originator",
        b"openai-beta",
        b"version",
        b"session_id",
        b"session-id",
        b"x-client-request-id",
        b"x-claude-code-session-id",
        b"conversation_id",
    }
)
_PREFIXES = (b"x-stainless-", b"x-codex-", b"x-openai-", b"x-claude-")


def rollout_key(scope: Scope) -> str | None:
    """The key from ``Authorization: Bearer …`` or ``x-api-key``, if any."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            v = value.decode("latin-1")
            if v[:7].lower() == "bearer ":
                return v[7:].strip() or None
        elif name == b"x-api-key":
            return value.decode("latin-1").strip() or None
    return None


def harness_identity(scope: Scope) -> dict[str, Any]:
    """The identifying headers of a request, lower-cased names to values."""
    out: dict[str, Any] = {}
    for name, value in scope["headers"]:
        if name in _IDENTITY or name.startswith(_PREFIXES):
            out[name.decode("latin-1")] = value.decode("latin-1")
    return out
