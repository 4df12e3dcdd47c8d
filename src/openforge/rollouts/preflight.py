"""Checking a gateway URL before a run starts, so that a wrong one stops the command at
once with a message saying what to pass, instead of every rollout ending as ``infra_error``.

The admin API is asked for ``/admin/status`` with the admin token: nothing answering (a
wrong port, a gateway not started), a server without the admin routes (a model API: the
gateway's model port, vLLM, any OpenAI-compatible server) and a refused token are each
told apart. Connecting is given well under a second; a gateway that accepts the
connection gets longer to answer, as a busy one (training on the same cores) may be slow.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import httpx

from openforge.home import admin_token_path

__all__ = ["GatewayUnusable", "check_gateway", "check_gateway_sync"]

_CONNECT_S = 0.8
_ANSWER_S = 10.0
_TOKEN_ENV = "OPENFORGE_ADMIN_TOKEN"


class GatewayUnusable(Exception):
    """The URL given as a gateway's admin API cannot be used; the message says why and
    what to pass instead."""


def _next_port(url: str) -> str | None:
    """``url`` with its port one higher: where ``openforge gateway`` puts the admin API."""
    parts = urlsplit(url)
    if parts.port is None or parts.hostname is None:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return urlunsplit((parts.scheme, f"{host}:{parts.port + 1}", "", "", ""))


def _token_source() -> str:
    if os.environ.get(_TOKEN_ENV):
        return f"${_TOKEN_ENV}"
    path = admin_token_path()
    return str(path) if path.is_file() else "none: no $OPENFORGE_ADMIN_TOKEN, no token file"


def _model_api(url: str, option: str) -> GatewayUnusable:
    hint = _next_port(url)
    guess = f" (by default the model port + 1: {option} {hint})" if hint else ""
    return GatewayUnusable(
        f"{option} {url} is not a gateway's admin API: it has no /admin routes (a model API, "
        "such as the gateway's model port or an OpenAI-compatible server). Pass the admin "
        f"URL `openforge gateway` prints as 'admin API on http://…'{guess}"
    )


async def check_gateway(url: str, token: str | None, option: str = "--gateway") -> None:
    """Raise :class:`GatewayUnusable` unless ``url`` is a gateway admin API that takes
    ``token``; ``option`` names where the URL came from, in the message."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise GatewayUnusable(
            f"{option} {url!r} is not an http(s) URL; pass the admin URL `openforge gateway` "
            "prints, e.g. http://127.0.0.1:8001"
        )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx.Timeout(_ANSWER_S, connect=_CONNECT_S)
    status_url = url.rstrip("/") + "/admin/status"
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            resp = await http.get(status_url, headers=headers)
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise GatewayUnusable(
            f"{option} {url}: nothing answers there ({reason}). Start the gateway first "
            "(openforge gateway …) and pass the admin URL it prints as 'admin API on http://…'"
        ) from None
    if resp.status_code in (401, 403):
        raise GatewayUnusable(
            f"{option} {url}: the gateway refused the admin token (token from "
            f"{_token_source()}). Set ${_TOKEN_ENV} to the token that gateway uses (it prints "
            "where it keeps it when it starts)"
        )
    if resp.status_code in (404, 405):
        raise _model_api(url, option)
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code != 200 or not isinstance(body, dict) or "engine" not in body:
        raise GatewayUnusable(
            f"{option} {url}: /admin/status answered HTTP {resp.status_code}, not a gateway's "
            "status; pass the admin URL `openforge gateway` prints as 'admin API on http://…'"
        )


def check_gateway_sync(url: str, token: str | None, option: str = "--gateway") -> None:
    """:func:`check_gateway` from synchronous code (a CLI command before its event loop)."""
    import asyncio

    asyncio.run(check_gateway(url, token, option))
