"""Durable rollouts and calls: the :class:`Store` interface and its SQLite default."""

from openforge.store.base import RolloutConflict, RolloutNotFound, Store, StoreError
from openforge.store.schemas import CallRecord, CallStatus, Rollout, RolloutStatus
from openforge.store.sqlite import SchemaMismatch, SqliteStore

__all__ = [
    "CallRecord",
    "CallStatus",
    "Rollout",
    "RolloutConflict",
    "RolloutNotFound",
    "RolloutStatus",
    "SchemaMismatch",
    "SqliteStore",
    "Store",
    "StoreError",
]
