"""The rollouts admin API (JSON), for the orchestrator and the trainer.

    POST /admin/rollouts                {task_id?, group_id?, metadata?, roles?: ["judge", "user"]}
         → 201 {rollout_id, key, base_url, openai_base_url, anthropic_base_url,
                role_keys: {role: {key, base_url, openai_base_url, anthropic_base_url, model}}}
    POST /admin/rollouts/<id>/keys      {role: "judge" | "user"}
         → 201 {role, key, base_url, openai_base_url, anthropic_base_url, model}
         (a key whose calls are recorded under the rollout with that role and answered by
         the gateway's engine for it; 400 when the gateway has none, 409 once finished)
    GET  /admin/rollouts?status=&group_id=   → {rollouts: [rollout, ...]}
    GET  /admin/rollouts/<id>[?tokens=1][&content=1]   → rollout + {calls: [...]}
         (content=1: each call's canonical ``conversation`` and ``completion`` too, which
         the orchestrator's reward-hack monitor reads)
    POST /admin/rollouts/<id>/finish    {status, reward?, details?} → rollout
         (the same finish again → 200; a conflicting one → 409). It first refuses the
         rollout's new calls and waits (bounded) for those in flight; any that end later
         are recorded with status ``late``, never as the rollout's samples.
    POST /admin/rollouts/<id>/flags     {flags: [{rule, severity, where, evidence}]} → rollout
         (replaces the rollout's reward-hack flags, in any status; [] clears them)
    POST /admin/pause[?wait=0]          → {paused, in_flight, weight_version}
         (every gateway on the store holds new calls; returns once the calls in flight on
         all of them finished, unless wait=0)
    POST /admin/resume                  → {paused, in_flight, weight_version}
    POST /admin/weights                 {version, path?, adapter?}
         → {paused, in_flight, weight_version}
         (path: pause and drain every gateway on the store, load the checkpoint at path
         into the engine, or with adapter the LoRA adapter at path served under that
         name for the policy's calls, stamp version everywhere, resume; no path: stamp
         version only, marking calls that run across it; gateway/fleet.py)
    GET  /admin/status                  → {paused, in_flight, weight_version, engine, roles}
    GET  /admin/blobs/<sha256>          → the stored image's bytes (its media type), or 404
         (the veRL bridge reads a rollout's images here for ``multi_modal_data``)

Served on the admin listener only (never where harnesses reach). Every request needs
``Authorization: Bearer <token>``: the token is always in force (``openforge gateway``
generates and stores one when none is configured). Minted base URLs start with the
gateway's public URL (``--public-url``, else the model listener's bound address), never with
what a request's ``Host`` header says. Errors are ``{"error": {"type", "message"}}``.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from openforge.engines.base import AdapterEngine, Engine, TextEngine, UpdatableEngine
from openforge.gateway.control import Control
from openforge.gateway.fleet import Fleet
from openforge.gateway.limits import Limits
from openforge.store.base import RolloutConflict, RolloutNotFound, Store
from openforge.store.schemas import (
    SERVING_ROLES,
    TERMINAL,
    CallRecord,
    CallRole,
    Flag,
    Rollout,
    RolloutSelection,
    RolloutStatus,
)

__all__ = ["AdminApi", "rollout_json"]


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _error(status: int, kind: str, message: str) -> Response:
    return _json({"error": {"type": kind, "message": message}}, status)


class _AdminError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def rollout_json(rollout: Rollout) -> dict[str, Any]:
    """A rollout as the admin API shows it."""
    out = asdict(rollout)
    out["status"] = str(rollout.status)
    del out["key"]  # a secret: shown once, when minted
    return out


def _call_json(call: CallRecord, tokens: bool, content: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call.id,
        "seq": call.seq,
        "dialect": call.dialect,
        "status": str(call.status),
        "prompt_tokens": len(call.prompt_ids),
        "output_tokens": len(call.output_ids),
        "finish_reason": call.finish_reason,
        "fork": call.fork,
        "request_model": call.request_model,
        "engine": call.engine,
        "role": str(call.role),
        "weight_version": call.weight_version,
        "error": call.error,
        "harness": call.harness,
        "render_info": call.render_info,
        "created_at": call.created_at,
        "queued_s": call.queued_s,
        "first_token_s": call.first_token_s,
        "total_s": call.total_s,
    }
    if content:
        out["conversation"] = call.conversation
        out["completion"] = call.completion
    if tokens:
        out["prompt_ids"] = call.prompt_ids
        out["output_ids"] = call.output_ids
        out["output_logprobs"] = call.output_logprobs
    return out


async def _body(request: Request, limits: Limits) -> dict[str, Any]:
    """The JSON object of an admin request, read within the admin body limit and deadline."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_admin_body_bytes:  # refused at once
        raise _AdminError(
            413, "request_too_large",
            f"an admin body may have at most {limits.max_admin_body_bytes} bytes",
        )  # fmt: skip
    chunks, size = [], 0
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_admin_body_bytes:
                    raise _AdminError(
                        413, "request_too_large",
                        f"an admin body may have at most {limits.max_admin_body_bytes} bytes",
                    )  # fmt: skip
                chunks.append(chunk)
    except TimeoutError:
        raise _AdminError(408, "request_timeout", "the body did not arrive in time") from None
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _AdminError(400, "invalid_request", f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _AdminError(400, "invalid_request", "body must be a JSON object")
    return body


def _opt_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise _AdminError(400, "invalid_request", f"'{name}' must be a string")
    return value


class AdminApi:
    """The admin routes over one store, engine and control."""

    def __init__(
        self,
        store: Store,
        engine: Engine | TextEngine,
        control: Control,
        admin_token: str,
        public_url: str,
        drain_s: float = 10.0,
        limits: Limits | None = None,
        roles: dict[CallRole, Engine | TextEngine] | None = None,
        fleet: Fleet | None = None,
    ) -> None:
        self.store = store
        # Pause, resume and weights for every gateway on the store (gateway/fleet.py).
        self.fleet = fleet or Fleet(control, store, engine)
        # The engines answering judge and simulated-user keys (what ``roles`` may ask for).
        self.roles = dict(roles or {})
        self.engine = engine
        self.control = control
        self._expected = f"Bearer {admin_token}".encode()
        self.public_url = public_url.rstrip("/")
        # How long a finish waits for the rollout's calls in flight (then they are late).
        self.drain_s = drain_s
        self.limits = limits or Limits()

    def routes(self) -> list[Route]:
        """The Starlette routes under ``/admin``."""
        h = self._handle
        return [
            Route("/admin/rollouts", h(self.create), methods=["POST"]),
            Route("/admin/rollouts", h(self.list_rollouts), methods=["GET"]),
            Route("/admin/rollouts/{rollout_id}", h(self.get), methods=["GET"]),
            Route("/admin/rollouts/{rollout_id}/finish", h(self.finish), methods=["POST"]),
            Route("/admin/rollouts/{rollout_id}/keys", h(self.mint_key), methods=["POST"]),
            Route("/admin/rollouts/{rollout_id}/flags", h(self.flag), methods=["POST"]),
            Route("/admin/pause", h(self.pause), methods=["POST"]),
            Route("/admin/resume", h(self.resume), methods=["POST"]),
            Route("/admin/weights", h(self.weights), methods=["POST"]),
            Route("/admin/status", h(self.status), methods=["GET"]),
            Route("/admin/blobs/{sha256}", h(self.blob), methods=["GET"]),
        ]

    def _handle(self, fn: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            got = request.headers.get("authorization", "")
            if not hmac.compare_digest(got.encode(), self._expected):
                return _error(401, "authentication", "admin API needs the admin bearer token")
            try:
                return await fn(request)  # type: ignore[no-any-return]
            except _AdminError as exc:
                return _error(exc.status, exc.kind, exc.message)
            except RolloutNotFound as exc:
                return _error(404, "not_found", f"no rollout {exc}")
            except RolloutConflict as exc:
                return _error(409, "conflict", str(exc))

        return endpoint

    async def create(self, request: Request) -> Response:
        body = await _body(request, self.limits)
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise _AdminError(400, "invalid_request", "'metadata' must be an object")
        asked = body.get("roles") or []
        if not isinstance(asked, list):
            raise _AdminError(400, "invalid_request", "'roles' must be a list of role names")
        roles = [self._serving_role(r, "roles") for r in asked]
        rollout = await self.store.create_rollout(
            task_id=_opt_str(body, "task_id"),
            group_id=_opt_str(body, "group_id"),
            metadata=metadata,
            run_id=_opt_str(body, "run_id"),
            split=_opt_str(body, "split"),
        )
        out: dict[str, Any] = {"rollout_id": rollout.id, **self._urls(rollout.key)}
        out["role_keys"] = {
            str(role): await self._role_key(rollout.id, role) for role in dict.fromkeys(roles)
        }
        return _json(out, 201)

    def _urls(self, key: str) -> dict[str, str]:
        base = f"{self.public_url}/r/{key}"
        return {
            "key": key,
            "base_url": base,
            "openai_base_url": f"{base}/v1",
            "anthropic_base_url": base,
        }

    def _serving_role(self, value: Any, field: str) -> CallRole:
        """A role a key may be minted for, which this gateway has an engine for."""
        try:
            role = CallRole(value)
        except ValueError:
            role = None
        if role not in SERVING_ROLES:
            allowed = ", ".join(str(r) for r in SERVING_ROLES)
            raise _AdminError(
                400, "invalid_request", f"'{field}': {value!r} is not one of {allowed}"
            )
        if role not in self.roles:
            option = (
                "--judge-engine" if role is CallRole.JUDGE else "--user-engine or --judge-engine"
            )
            raise _AdminError(
                400,
                "invalid_request",
                f"this gateway serves no {role} engine (start it with {option})",
            )
        return role

    async def _role_key(self, rollout_id: str, role: CallRole) -> dict[str, str]:
        key = await self.store.mint_role_key(rollout_id, role)
        # The name to ask for: the served model (a server's name, "org/model" kept whole; a
        # local model's directory by its last part), else the role (an engine that serves
        # one model answers whatever name it is asked).
        served = self.roles[role].info().model
        model = (Path(served).name if Path(served).is_dir() else served) or str(role)
        return {"role": str(role), **self._urls(key), "model": model}

    async def mint_key(self, request: Request) -> Response:
        body = await _body(request, self.limits)
        role = self._serving_role(body.get("role"), "role")
        return _json(await self._role_key(request.path_params["rollout_id"], role), 201)

    async def list_rollouts(self, request: Request) -> Response:
        statuses: list[RolloutStatus] = []
        for s in request.query_params.getlist("status"):
            try:
                statuses.append(RolloutStatus(s))
            except ValueError:
                raise _AdminError(400, "invalid_request", f"unknown status {s!r}") from None
        q = request.query_params
        selection = RolloutSelection(
            runs=tuple(q.getlist("run_id")),
            splits=tuple(q.getlist("split")),
            tasks=tuple(q.getlist("task_id")),
        )
        rollouts = await self.store.rollouts(
            statuses or None, group_id=q.get("group_id"), selection=selection
        )
        return _json({"rollouts": [rollout_json(r) for r in rollouts]})

    async def get(self, request: Request) -> Response:
        rollout = await self.store.get_rollout(request.path_params["rollout_id"])
        tokens = request.query_params.get("tokens", "0") not in ("0", "", "false")
        content = request.query_params.get("content", "0") not in ("0", "", "false")
        calls = await self.store.calls(rollout.id, tokens=True)
        out = rollout_json(rollout)
        out["calls"] = [_call_json(c, tokens, content) for c in calls]
        return _json(out)

    async def flag(self, request: Request) -> Response:
        body = await _body(request, self.limits)
        raw = body.get("flags")
        if not isinstance(raw, list):
            raise _AdminError(400, "invalid_request", "'flags' must be a list of flags")
        flags: list[Flag] = []
        for i, item in enumerate(raw):
            fields = ("rule", "severity", "where", "evidence")
            if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in fields):
                message = f"'flags[{i}]' must be an object with string {', '.join(fields)}"
                raise _AdminError(400, "invalid_request", message)
            try:
                flags.append(Flag.from_json(item))
            except ValueError as exc:
                raise _AdminError(400, "invalid_request", f"'flags[{i}]': {exc}") from None
        rollout = await self.store.flag_rollout(request.path_params["rollout_id"], flags)
        return _json(rollout_json(rollout))

    async def blob(self, request: Request) -> Response:
        digest = request.path_params["sha256"]
        found = await self.store.get_blob(digest)
        if found is None:
            raise _AdminError(404, "not_found", f"no blob sha256:{digest}")
        return Response(found.data, media_type=found.media_type)

    async def finish(self, request: Request) -> Response:
        body = await _body(request, self.limits)
        try:
            status = RolloutStatus(str(body.get("status")))
        except ValueError:
            allowed = ", ".join(sorted(str(s) for s in TERMINAL))
            message = f"'status' must be one of {allowed}"
            raise _AdminError(400, "invalid_request", message) from None
        if status not in TERMINAL:
            raise _AdminError(400, "invalid_request", f"'status' {status} is not terminal")
        reward = body.get("reward")
        if reward is not None and (not isinstance(reward, int | float) or isinstance(reward, bool)):
            raise _AdminError(400, "invalid_request", "'reward' must be a number")
        details = body.get("details")
        if details is not None and not isinstance(details, dict):
            raise _AdminError(400, "invalid_request", "'details' must be an object")
        rollout_id = request.path_params["rollout_id"]
        await self.control.close(rollout_id, self.drain_s)
        rollout = await self.store.finish_rollout(
            rollout_id,
            status,
            None if reward is None else float(reward),
            details,
        )
        self.control.forget(rollout.id)
        return _json(rollout_json(rollout))

    def _status(self) -> dict[str, Any]:
        return {
            "paused": self.control.paused,
            "in_flight": self.control.in_flight,
            "weight_version": self.control.weight_version,
        }

    async def pause(self, request: Request) -> Response:
        wait = request.query_params.get("wait", "1") not in ("0", "false")
        await self.fleet.pause(wait)
        return _json(self._status())

    async def resume(self, request: Request) -> Response:
        await self.fleet.resume()
        return _json(self._status())

    async def weights(self, request: Request) -> Response:
        body = await _body(request, self.limits)
        version = body.get("version")
        if not isinstance(version, str | int) or isinstance(version, bool) or version == "":
            raise _AdminError(400, "invalid_request", "'version' (string) is required")
        version = str(version)
        path = _opt_str(body, "path")
        adapter = _opt_str(body, "adapter")
        if path is None:
            if adapter is not None:
                raise _AdminError(400, "invalid_request", "'adapter' needs the adapter's 'path'")
            await self.fleet.stamp(version)
            return _json(self._status())
        load = self._loader(version, path, adapter)
        try:
            await self.fleet.update_weights(version, path, load, adapter)
        except Exception as exc:
            raise _AdminError(500, "engine_error", f"weight update failed: {exc}") from exc
        return _json(self._status())

    def _loader(
        self, version: str, path: str, adapter: str | None
    ) -> Callable[[], Awaitable[None]]:
        """What loads the weights (or the LoRA adapter) at ``path`` into the engine."""
        engine = self.engine
        kind = engine.info().kind
        if adapter is not None:
            if adapter == "":
                raise _AdminError(400, "invalid_request", "'adapter' must name the adapter")
            if not isinstance(engine, AdapterEngine):
                raise _AdminError(
                    400, "invalid_request", f"the {kind} engine cannot load LoRA adapters"
                )
            return functools.partial(engine.load_adapter, adapter, path, version)
        if not isinstance(engine, UpdatableEngine):
            raise _AdminError(400, "invalid_request", f"the {kind} engine cannot load weights")
        return functools.partial(engine.update_weights, path, version)

    async def status(self, request: Request) -> Response:
        info = self.engine.info()
        roles = {str(r): asdict(e.info()) for r, e in self.roles.items()}
        return _json({**self._status(), "engine": asdict(info), "roles": roles})
