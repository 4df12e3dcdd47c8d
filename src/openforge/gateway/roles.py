"""Call roles at the gateway: which key a call came with, and which engine serves it.

A rollout's own key (minted with the rollout) makes ``policy`` calls: the harness's, served
by the gateway's engine (recorded ``teacher`` when that engine is an upstream text API). A
rollout may also be given keys for the roles that serve a benchmark around the agent
(:data:`~openforge.store.schemas.SERVING_ROLES`): ``judge`` (an LLM judge a grader asks) and
``user`` (the simulated user of a multi-turn task). Their calls are answered by the gateway's
judge engine (``--judge-engine``; the user shares it unless ``--user-engine`` is given),
recorded under the rollout with their role, never held at the pause gate of a weight update
(the policy's weights are not theirs), and never become training samples.

Each role renders with its own model's tokenizer and its own history per rollout, so a
judge's prompt never forks the agent's token path.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Scope

from openforge.dialects.errors import ApiError
from openforge.engines.base import Engine, TextEngine
from openforge.gateway.control import Control
from openforge.gateway.identity import rollout_key
from openforge.store.base import Store
from openforge.store.schemas import TERMINAL, CallRole, Rollout

__all__ = ["Caller", "Keys", "RoleEngine"]


@dataclass(frozen=True, slots=True)
class RoleEngine:
    """The engine that answers one role's calls and the model whose tokenizer and chat
    template render them (for a text engine: encode its answers for the record)."""

    engine: Engine | TextEngine
    model: str


@dataclass(frozen=True, slots=True)
class Caller:
    """Whom a call is from: the rollout its key belongs to, and the key's role."""

    rollout: Rollout
    role: CallRole


class Keys:
    """Resolves a call's key (path, ``Authorization`` or ``x-api-key``) to its caller."""

    def __init__(self, store: Store, control: Control, allow_anonymous: bool = False) -> None:
        self.store = store
        self.control = control
        self.allow_anonymous = allow_anonymous

    async def authorize(self, scope: Scope, path_key: str | None) -> Caller:
        """The caller; ApiError for unknown keys or finished rollouts."""
        key = path_key or rollout_key(scope)
        caller: Caller | None = None
        if key:
            rollout = await self.store.rollout_by_key(key)
            if rollout is not None:
                caller = Caller(rollout, CallRole.POLICY)
            else:
                found = await self.store.rollout_by_role_key(key)
                if found is not None:
                    caller = Caller(*found)
        if caller is None:
            if self.allow_anonymous:
                return Caller(await self.control.anonymous(), CallRole.POLICY)
            raise ApiError("authentication", "Unknown or missing rollout key.")
        rollout = caller.rollout
        if rollout.status in TERMINAL:
            raise ApiError(
                "permission", f"Rollout {rollout.id} is finished ({rollout.status}); no more calls."
            )
        return caller
