"""The base class for request-side protocol models.

Request models accept fields they do not know (harnesses send beta and vendor fields
every release) and log them at debug level so an ignored field is visible when asked
for, never a 400. Response-side shapes are ``TypedDict``s: typed for mypy, and plain
dicts for orjson on the hot path, with keys in the docs' order.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["WireIn"]

log = logging.getLogger("openforge.dialects.ignored")


class WireIn(BaseModel):
    """A request-side model: unknown fields are kept in ``model_extra`` and logged."""

    model_config = ConfigDict(extra="allow", frozen=False, protected_namespaces=(), strict=True)

    @model_validator(mode="after")
    def _log_ignored(self) -> Any:
        if self.model_extra and log.isEnabledFor(logging.DEBUG):
            log.debug("%s: ignored fields %s", type(self).__name__, sorted(self.model_extra))
        return self
