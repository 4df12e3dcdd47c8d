"""The store's errors, in a module of their own so every store module can raise them
without importing the interface (:mod:`openforge.store.base` re-exports them)."""

from __future__ import annotations

__all__ = ["RolloutConflict", "RolloutNotFound", "StoreError"]


class StoreError(Exception):
    """Base of the store's errors."""


class RolloutNotFound(StoreError):
    pass


class RolloutConflict(StoreError):
    """A transition the rollout's state does not allow (finish twice, differently)."""
