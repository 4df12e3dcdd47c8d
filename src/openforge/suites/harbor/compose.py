"""The services of a Harbor task's ``environment/docker-compose.yaml`` besides ``main``, as
sidecar containers sharing the task's network (:class:`ServiceContainer`).

Harbor merges the file over its own ``main`` service; the others are built (``build``:
a context, or a table with ``context`` and ``dockerfile``) or pulled (``image``), get their
``environment`` (``${VAR}`` / ``${VAR:-default}`` from this host, empty when unset, as
compose does) and ``command``, and are waited for until their ``healthcheck`` passes (compose's
``test``: ``["CMD", …]``, ``["CMD-SHELL", "…"]`` or a string; durations like ``2s`` or
``1m30s``). ``main``'s own overrides (``depends_on``) need nothing here: the sandbox is handed
out only once every sidecar is healthy. Keys with no meaning for a sidecar sharing the
sandbox's network (``expose``, ``ports``, ``networks``) are accepted; others are warnings.
A service whose environment names a vendor's API key (``ANTHROPIC_API_KEY``,
``OPENAI_API_KEY``: the cookbook's simulated user) and not that API's base URL calls a
model: in a rollout its key and base URL become the rollout's user-role key on the gateway
(``ServiceContainer.model_apis``).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from openforge.sandboxes.base import ModelApi, ServiceContainer, TaskImage
from openforge.tasks.model import TaskError, TaskWarning, inside, unknown_keys

__all__ = ["compose_services"]

_SERVICE = (
    "build", "image", "environment", "command", "healthcheck", "expose", "ports", "depends_on",
    "restart", "container_name", "networks", "init",
)  # fmt: skip
_HEALTH = ("test", "interval", "timeout", "retries", "start_period", "start_interval", "disable")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
# A service whose environment names one of these keys calls that vendor's model API (the
# cookbook's simulated user: ``ANTHROPIC_API_KEY=${ANTHROPIC_API_KEY}``), unless it sets the
# API's base URL itself (a model the task serves, say, in a sidecar of its own).
_MODEL_KEYS: dict[ModelApi, tuple[frozenset[str], str]] = {
    "anthropic": (frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"}), "ANTHROPIC_BASE_URL"),
    "openai": (frozenset({"OPENAI_API_KEY"}), "OPENAI_BASE_URL"),
}


def _model_apis(env: dict[str, str]) -> tuple[ModelApi, ...]:
    """The vendor APIs a service with ``env`` calls (see :data:`_MODEL_KEYS`)."""
    return tuple(
        api for api, (keys, base) in _MODEL_KEYS.items() if keys & env.keys() and not env.get(base)
    )


def _seconds(file: Path, value: Any, where: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise TaskError(file, where, f"must be a duration like 2s or 1m30s, got {value!r}")
    return sum(float(n) * _UNIT[u] for n, u in parts)


def _environment(file: Path, value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):
        pairs = [str(v).partition("=") for v in value]
        raw = {k: (v if sep else os.environ.get(k, "")) for k, sep, v in pairs}
    elif isinstance(value, dict):
        raw = {str(k): "" if v is None else str(v) for k, v in value.items()}
    else:
        raise TaskError(file, where, "must be a list of NAME=value or a table")
    return {
        k: _TEMPLATE.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), v)
        for k, v in raw.items()
    }


def _health(file: Path, value: Any, where: str, warns: list[TaskWarning]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TaskError(file, where, "must be a table")
    warns += unknown_keys(file, value, _HEALTH, f"{where}.")
    if value.get("disable"):
        return {}
    test = value.get("test")
    if isinstance(test, str):
        argv: tuple[str, ...] = ("sh", "-c", test)
    elif isinstance(test, list) and test and test[0] == "CMD" and len(test) > 1:
        argv = tuple(str(t) for t in test[1:])
    elif isinstance(test, list) and len(test) == 2 and test[0] == "CMD-SHELL":
        argv = ("sh", "-c", str(test[1]))
    elif test is None or test == ["NONE"]:
        return {}
    else:
        raise TaskError(file, f"{where}.test", f"must be CMD, CMD-SHELL or a string, got {test!r}")
    retries = value.get("retries", 3)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
        raise TaskError(file, f"{where}.retries", f"must be a positive integer, got {retries!r}")
    return {
        "health": argv,
        "interval_s": _seconds(file, value.get("interval"), f"{where}.interval", 30.0),
        "timeout_s": _seconds(file, value.get("timeout"), f"{where}.timeout", 30.0),
        "start_period_s": _seconds(file, value.get("start_period"), f"{where}.start_period", 0),
        "retries": retries,
    }


def _image(compose: Path, spec: dict[str, Any], where: str, timeout_s: float) -> TaskImage:
    build = spec.get("build")
    if build is None:
        image = spec.get("image")
        if not isinstance(image, str) or not image:
            raise TaskError(compose, where, "needs a build or an image")
        return TaskImage(image=image, build_timeout_s=timeout_s)
    if isinstance(build, str):
        build = {"context": build}
    if not isinstance(build, dict):
        raise TaskError(compose, f"{where}.build", "must be a path or a table")
    context = inside(compose.parent, str(build.get("context", ".")), compose, f"{where}.build")
    dockerfile = inside(context, str(build.get("dockerfile", "Dockerfile")), compose,
                        f"{where}.build.dockerfile")  # fmt: skip
    if not dockerfile.is_file():
        raise TaskError(compose, f"{where}.build", f"no Dockerfile at {dockerfile}")
    return TaskImage(context=str(context), dockerfile=str(dockerfile), build_timeout_s=timeout_s)


def compose_services(
    compose: Path, build_timeout_s: float, warns: list[TaskWarning]
) -> tuple[ServiceContainer, ...]:
    """The services of ``compose`` besides ``main``, as sidecars."""
    try:
        spec = yaml.safe_load(compose.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise TaskError(compose, "(yaml)", f"not valid YAML: {exc}") from exc
    services = spec.get("services") if isinstance(spec, dict) else None
    if not isinstance(services, dict):
        return ()
    out = []
    for name, body in services.items():
        if name == "main":
            continue
        where = f"services.{name}"
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", str(name)):
            raise TaskError(compose, where, "a service name must be [a-z0-9_.-]")
        if not isinstance(body, dict):
            raise TaskError(compose, where, "must be a table")
        warns += unknown_keys(compose, body, _SERVICE, f"{where}.")
        command = body.get("command") or ()
        if isinstance(command, str):
            command = shlex.split(command)
        if not isinstance(command, list | tuple):
            raise TaskError(compose, f"{where}.command", "must be a string or a list")
        env = _environment(compose, body.get("environment"), f"{where}.environment")
        out.append(
            ServiceContainer(
                name=str(name),
                image=_image(compose, body, where, build_timeout_s),
                env=env,
                command=tuple(str(c) for c in command),
                model_apis=_model_apis(env),
                **_health(compose, body.get("healthcheck"), f"{where}.healthcheck", warns),
            )
        )
    return tuple(out)
