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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from openforge.dialects.dialect import TokenCounting
from openforge.dialects.errors import ApiError
from openforge.engines.base import Engine, TextEngine
from openforge.gateway.admin import AdminApi
from openforge.gateway.control import Control
from openforge.gateway.prompting import Prompting
from openforge.gateway.service import CallService, ServedDialect, read_body, send_full
from openforge.store.base import Store

__all__ = ["GatewayApp", "GatewayApps", "GatewayConfig", "build_apps"]


@dataclass(slots=True)
class GatewayConfig:
    model: str  # the model directory whose tokenizer and template render prompts
    admin_token: str  # always enforced on the admin listener
    public_url: str  # the root URL harnesses reach (minted base URLs start with it)
    allow_anonymous: bool = False
    max_body_bytes: int = 64 << 20
    finish_drain_s: float = 10.0  # a finish waits this long for the rollout's calls

    def __post_init__(self) -> None:
        if not self.admin_token:
            raise ValueError("the admin token must not be empty")


class _ModelEndpoint:
    """A raw ASGI endpoint for one dialect (no Request object on the hot path)."""

    def __init__(self, service: CallService, served: ServedDialect) -> None:
        self.service, self.served = service, served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = scope.get("path_params", {}).get("key")
        await self.service.serve(self.served, key, scope, receive, send)


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

    def __init__(self, service: CallService, served: ServedDialect, counting: TokenCounting):
        self.service, self.served, self.counting = service, served, counting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive, self.service.max_body_bytes)
            await self.service.authorize(scope, scope.get("path_params", {}).get("key"))
            conversation = self.counting.parse(body)
            n = self.service.prompting.count_tokens(conversation)
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


@dataclass(frozen=True, slots=True)
class GatewayApps:
    """What a gateway serves: ``model`` for harnesses, ``admin`` on its own listener."""

    model: GatewayApp
    admin: Starlette
    service: CallService
    control: Control


def build_apps(engine: Engine | TextEngine, store: Store, config: GatewayConfig) -> GatewayApps:
    """The model and admin apps over ``engine`` and ``store``."""
    control = Control(store, weight_version=engine.info().weight_version)
    prompting = Prompting(config.model)
    service = CallService(
        engine,
        store,
        control,
        prompting,
        allow_anonymous=config.allow_anonymous,
        max_body_bytes=config.max_body_bytes,
    )
    admin = AdminApi(
        store, engine, control, config.admin_token, config.public_url, config.finish_drain_s
    )
    models = _models_body(Path(engine.info().model).name or engine.info().model)

    async def health(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def list_models(request: Request) -> Response:
        return Response(models, media_type="application/json")

    model_routes: list[BaseRoute] = []
    for served in service.dialects:
        endpoint = _ModelEndpoint(service, served)
        model_routes.append(Route(served.dialect.path, endpoint, methods=["POST"]))
        counting = served.dialect.token_counting
        if counting is not None:
            count = _CountTokens(service, served, counting)
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
    return GatewayApps(
        model=GatewayApp(Starlette(routes=routes), fast),
        admin=Starlette(routes=admin_routes),
        service=service,
        control=control,
    )
