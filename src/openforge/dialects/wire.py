"""The base class for request-side protocol models.

Request models accept fields they do not know (harnesses send beta and vendor fields
every release) and log them at debug level so an ignored field is visible when asked
for, never a 400. Response-side shapes are ``TypedDict``s: typed for mypy, and plain
dicts for orjson on the hot path, with keys in the docs' order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["WireIn", "log_ignored", "type_tag", "wire_type"]

log = logging.getLogger("openforge.dialects.ignored")


class WireIn(BaseModel):
    """A request-side model: unknown fields are kept in ``model_extra`` (see
    :func:`log_ignored`)."""

    model_config = ConfigDict(extra="allow", frozen=False, protected_namespaces=(), strict=True)


def log_ignored(request: BaseModel) -> None:
    """Log, at debug level, the fields ``request`` and the models inside it ignored.

    A walk after validation, and only when debug is on: a validator on every model ran a
    Python call per message, content part and tool (~27 in an agent's call, ~10% of
    parsing it) to find nothing to log.
    """
    if not log.isEnabledFor(logging.DEBUG):
        return
    stack: list[object] = [request]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseModel):
            if item.model_extra:
                log.debug("%s: ignored fields %s", type(item).__name__, sorted(item.model_extra))
            stack.extend(item.__dict__.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def wire_type(value: Any, missing: str | None = None) -> object:
    """The ``type`` of a union member being validated: a dict's key (``missing`` when it
    has none) or a model's attribute."""
    return value.get("type", missing) if isinstance(value, dict) else getattr(value, "type", None)


def type_tag(served: Collection[str], missing: str | None = None) -> Callable[[Any], str]:
    """A discriminator for a union tagged on ``type``: the type when it is one of
    ``served``, else ``"other"`` (a type that is not even a string included)."""

    def tag(value: Any) -> str:
        kind = wire_type(value, missing)
        return kind if isinstance(kind, str) and kind in served else "other"

    return tag
