"""The gateway's two ASGI apps: model calls and admin, served on separate listeners.

The model app (thin routes over :class:`CallService`) is what harnesses reach; it has no
admin route at all, so an agent whose sandbox can reach only the model listener cannot list,
mint or finish rollouts whatever it sends. The admin app (:class:`AdminApi`) listens on its
own socket, for the orchestrator and trainer, and always requires the admin token.

Model routes exist at the root (key in ``Authorization``/``x-api-key``) and under
``/r/<key>`` (key in the path, for harnesses that can only set a base URL). Each dialect in
:data:`openforge.dialects.catalog.DIALECTS` declares its own routes (today
``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages`` and Anthropic's
``/v1/messages/count_tokens``); besides them::

    GET  /v1/models                  the served model (OpenAI and Anthropic list shapes)
    HEAD /, GET /health              liveness (both listeners)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from openforge.dialects.dialect import TokenCounting
from openforge.dialects.errors import ApiError
from openforge.engines.base import Engine, TextEngine
from openforge.gateway.admin import AdminApi
from openforge.gateway.asgi import read_body, send_full
from openforge.gateway.call import ServedDialect
from openforge.gateway.connections import generic_error
from openforge.gateway.control import Control
from openforge.gateway.fleet import Fleet
from openforge.gateway.limits import Limits
from openforge.gateway.prompting import Prompting
from openforge.gateway.roles import Keys, RoleEngine
from openforge.gateway.service import CallService
from openforge.store.base import Store
from openforge.store.schemas import SERVING_ROLES, CallRole

__all__ = ["GatewayApp", "GatewayApps", "GatewayConfig", "Limits", "build_apps"]


@dataclass(slots=True)
class GatewayConfig:
    model: str  # the model directory whose tokenizer and template render prompts
    admin_token: str  # always enforced on the admin listener
    public_url: str  # the root URL harnesses reach (minted base URLs start with it)
    allow_anonymous: bool = False
    finish_drain_s: float = 10.0  # a finish waits this long for the rollout's calls
    limits: Limits = field(default_factory=Limits)
    # Format names overriding the model family's detected ones (rendering/families).
    tool_format: str | None = None
    reasoning_format: str | None = None

    def __post_init__(self) -> None:
        if not self.admin_token:
            raise ValueError("the admin token must not be empty")


class _ModelEndpoint:
    """A raw ASGI endpoint for one dialect (no Request object on the hot path): reads the
    body, resolves the key to its rollout and role, and hands the call to that role's
    service."""

    def __init__(self, keys: Keys, services: dict[CallRole, CallService], index: int) -> None:
        self.keys, self.services, self.index = keys, services, index
        policy = services[CallRole.POLICY]
        self.served = policy.dialects[index]
        self.limits = policy.limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()
        key = scope.get("path_params", {}).get("key")
        try:
            body = await read_body(
                scope, receive, self.limits.max_body_bytes, self.limits.body_timeout_s
            )
            caller = await self.keys.authorize(scope, key)
            service = _service_for(self.services, caller.role)
        except ApiError as err:
            await send_full(send, *self.served.dialect.render_error(err))
            return
        served = service.dialects[self.index]
        await service.serve(served, caller.rollout, body, t0, scope, receive, send)


def _service_for(services: dict[CallRole, CallService], role: CallRole) -> CallService:
    service = services.get(role)
    if service is None:  # a key minted by another replica configured with the role
        raise ApiError("permission", f"This gateway serves no {role} engine.")
    return service


class GatewayApp:
    """The ASGI app: model calls go straight to their endpoint, the rest to Starlette.

    A pure ASGI front (Starlette's own advice for hot paths): a model call's response is
    many ``send``s, and Starlette's middleware stack wraps every one of them twice
    (error and exception middleware) on top of routing. Exact paths are looked up in a
    dict, with or without the ``/r/<key>`` prefix; everything else (admin, health,
    models, and wrong methods) goes through the Starlette app as before.
    """

    def __init__(self, app: Starlette, endpoints: dict[str, Any]) -> None:
        self.app = app
        self._endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            endpoint = self._endpoints.get(path)
            key = None
            if endpoint is None and path.startswith("/r/"):
                key, _, rest = path[3:].partition("/")
                endpoint = self._endpoints.get("/" + rest) if key else None
            if endpoint is not None:
                scope["path_params"] = {"key": key} if key else {}
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _CountTokens:
    """A dialect's token-counting endpoint (Anthropic's ``{"input_tokens": n}``)."""

    def __init__(
        self,
        keys: Keys,
        services: dict[CallRole, CallService],
        served: ServedDialect,
        counting: TokenCounting,
    ) -> None:
        self.keys, self.services, self.served, self.counting = keys, services, served, counting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            limits = self.services[CallRole.POLICY].limits
            body = await read_body(scope, receive, limits.max_body_bytes, limits.body_timeout_s)
            caller = await self.keys.authorize(scope, scope.get("path_params", {}).get("key"))
            service = _service_for(self.services, caller.role)
            conversation = self.counting.parse(body)
            n = service.prompting.count_tokens(conversation)
        except ApiError as err:
            await send_full(send, *self.served.dialect.render_error(err))
            return
        await send_full(send, 200, self.counting.render(n))


def _models_body(name: str) -> bytes:
    now = int(time.time())
    entry = {
        "id": name,
        "object": "model",
        "created": now,
        "owned_by": "openforge",
        "type": "model",
        "display_name": name,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }
    return orjson.dumps(
        {"object": "list", "data": [entry], "has_more": False, "first_id": name, "last_id": name}
    )


def _model_error(dialects: tuple[ServedDialect, ...], request: Request, exc: Exception) -> Response:
    """404/405 on the model listener, in the shape of the dialect whose route it was near
    (a GET on Anthropic's route gets Anthropic's envelope); elsewhere one both SDKs read."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    path = request.url.path
    if path.startswith("/r/"):
        path = "/" + path[3:].partition("/")[2]
    if status == 405:
        message = f"Method {request.method} is not allowed on {path}."
    else:
        message = f"Unknown route {path}."
    for served in dialects:
        if path.startswith(served.dialect.path):
            err = ApiError("invalid_request" if status == 405 else "not_found", message)
            _, body = served.dialect.render_error(err)
            return Response(body, status, media_type="application/json")
    kind = "invalid_request_error" if status == 405 else "not_found_error"
    return Response(generic_error(kind, message), status, media_type="application/json")


def _admin_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    kind = {404: "not_found", 405: "method_not_allowed"}.get(status, "error")
    message = f"{request.method} {request.url.path}: " + (
        exc.detail if isinstance(exc, HTTPException) else "internal error"
    )
    body = orjson.dumps({"error": {"type": kind, "message": message}})
    return Response(body, status, media_type="application/json")


def _http_errors(
    render: Callable[[Request, Exception], Response],
) -> dict[Any, Callable[[Request, Exception], Response]]:
    """Starlette's own 404 and 405 (plain text by default) rendered as JSON."""
    return {404: render, 405: render}


@dataclass(frozen=True, slots=True)
class GatewayApps:
    """What a gateway serves: ``model`` for harnesses, ``admin`` on its own listener."""

    model: GatewayApp
    admin: Starlette
    service: CallService  # the policy's
    control: Control
    # Every role's service (the policy's and, when configured, the judge's and user's).
    services: dict[CallRole, CallService] = field(default_factory=dict)
    # Its part in the state every gateway on the store shares (started before serving).
    fleet: Fleet | None = None


def _role_services(
    store: Store,
    control: Control,
    config: GatewayConfig,
    policy: Prompting,
    roles: Mapping[CallRole, RoleEngine],
) -> dict[CallRole, CallService]:
    """A service per serving role, sharing a renderer between roles of the same model."""
    promptings = {config.model: policy}
    out: dict[CallRole, CallService] = {}
    for role, spec in roles.items():
        if role not in SERVING_ROLES:
            raise ValueError(f"no engine can be configured for the {role} role")
        prompting = promptings.get(spec.model)
        if prompting is None:
            prompting = promptings[spec.model] = Prompting(spec.model)
        out[role] = CallService(
            spec.engine, store, control, prompting, limits=config.limits, role=role
        )
    return out


def build_apps(
    engine: Engine | TextEngine,
    store: Store,
    config: GatewayConfig,
    roles: Mapping[CallRole, RoleEngine] | None = None,
) -> GatewayApps:
    """The model and admin apps over ``engine`` and ``store``; ``roles``: the engines
    that answer judge and simulated-user keys (see :mod:`openforge.gateway.roles`)."""
    control = Control(store, weight_version=engine.info().weight_version)
    fleet = Fleet(control, store, engine)
    prompting = Prompting(config.model, config.tool_format, config.reasoning_format)
    service = CallService(engine, store, control, prompting, limits=config.limits)
    services = {
        CallRole.POLICY: service,
        **_role_services(store, control, config, prompting, roles or {}),
    }
    keys = Keys(store, control, config.allow_anonymous)
    admin = AdminApi(
        store,
        engine,
        control,
        config.admin_token,
        config.public_url,
        config.finish_drain_s,
        config.limits,
        roles={r: s.engine for r, s in services.items() if r is not CallRole.POLICY},
        fleet=fleet,
    )
    models = _models_body(Path(engine.info().model).name or engine.info().model)

    async def health(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def list_models(request: Request) -> Response:
        return Response(models, media_type="application/json")

    model_routes: list[BaseRoute] = []
    for index, served in enumerate(service.dialects):
        endpoint = _ModelEndpoint(keys, services, index)
        model_routes.append(Route(served.dialect.path, endpoint, methods=["POST"]))
        counting = served.dialect.token_counting
        if counting is not None:
            count = _CountTokens(keys, services, served, counting)
            model_routes.append(Route(counting.path, count, methods=["POST"]))
    model_routes.append(Route("/v1/models", list_models, methods=["GET"]))
    model_routes.append(Route("/models", list_models, methods=["GET"]))
    routes: list[BaseRoute] = [
        Route("/", health, methods=["GET", "HEAD"]),
        Route("/health", health, methods=["GET", "HEAD"]),
        *model_routes,
    ]
    for route in model_routes:
        assert isinstance(route, Route)
        routes.append(Route("/r/{key}" + route.path, route.endpoint, methods=route.methods))
    routes.append(Route("/r/{key}", health, methods=["GET", "HEAD"]))
    fast = {
        r.path: r.endpoint
        for r in model_routes
        if isinstance(r, Route) and r.methods and "POST" in r.methods
    }
    admin_routes: list[BaseRoute] = [
        Route("/", health, methods=["GET", "HEAD"]),
        Route("/health", health, methods=["GET", "HEAD"]),
        *admin.routes(),
    ]
    model_errors = _http_errors(lambda r, e: _model_error(service.dialects, r, e))
    admin_errors = _http_errors(_admin_error)
    return GatewayApps(
        model=GatewayApp(Starlette(routes=routes, exception_handlers=model_errors), fast),
        admin=Starlette(routes=admin_routes, exception_handlers=admin_errors),
        service=service,
        control=control,
        services=services,
        fleet=fleet,
    )
