"""Turning CLI options into an engine and a model directory, with errors that name the option."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from openforge.engines.base import Engine, TextEngine
from openforge.gateway.roles import RoleEngine
from openforge.store.schemas import CallRole

__all__ = [
    "ENGINE_SPEC_HELP",
    "build_engine",
    "build_role_engine",
    "check_engine_urls",
    "resolve_model_dir",
    "role_engines",
    "unreachable",
]

ENGINE_SPEC_HELP = (
    "KIND[:ARG][?KEY=VALUE&...]: scripted:FILE, local[:MODEL], vllm:URL[,URL], sglang:URL, "
    "upstream:URL; keys: model (tokenizer and template; default --model), served (the name "
    "the server knows), api (upstream: openai or anthropic), max_context"
)
_SPEC_KEYS = ("model", "served", "api", "max_context")

Fail = Callable[[str], Any]


def _die(fail: Fail, message: str) -> NoReturn:
    fail(message)
    raise SystemExit(2)  # fail() normally exits; this keeps the type checker honest


def unreachable(url: str, timeout_s: float = 0.8) -> str | None:
    """Why nothing can be asked at ``url`` (not an http(s) URL, no name, nothing listening),
    found in under a second; None when something accepts a connection there."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL; pass the server's root, e.g. http://127.0.0.1:8000"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return None
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        return (
            f"nothing answers there ({reason}); start the server first, or pass the URL it "
            "serves on"
        )


def check_engine_urls(
    engine: str, urls: list[str], judge: str | None, user: str | None, fail: Fail
) -> None:
    """Stop at once when an engine server the options name cannot be reached: ``--url``
    of a vllm, sglang or upstream ``--engine``, and the URLs of ``--judge-engine`` /
    ``--user-engine`` SPECs (a server lost later is each call's engine error instead)."""
    checks = [("--url", u) for u in urls] if engine in _REMOTE else []
    for option, spec in (("--judge-engine", judge), ("--user-engine", user)):
        kind, _, arg = (spec or "").partition("?")[0].partition(":")
        if kind in _REMOTE and arg:
            checks += [(f"{option} {spec}:", u) for u in arg.split(",")]
    for option, url in checks:
        problem = unreachable(url)
        if problem is not None:
            _die(fail, f"{option} {url}: {problem}")


_REMOTE = ("vllm", "sglang", "upstream")


def resolve_model_dir(model: str, fail: Fail) -> str:
    """``--model``: a known name (``smollm2-135m``), a HF directory or a GGUF file."""
    try:
        from openforge.models.registry import resolve_model
    except ImportError:
        path = Path(model)
        if not path.exists():
            _die(fail, f"--model {model}: no such directory")
        return str(path)
    try:
        return str(resolve_model(model))
    except Exception as exc:
        _die(fail, f"--model {model}: {exc}")


def build_engine(
    kind: str,
    model_dir: str,
    script: Path | None,
    urls: list[str],
    api: str | None,
    max_context: int | None,
    fail: Fail,
    served_model: str = "",
    formats: tuple[str | None, str | None] = (None, None),
) -> Engine | TextEngine:
    """The engine ``--engine`` names, configured from the other options.

    ``upstream`` (a teacher API) is a text engine: ``--model`` still names the model whose
    tokenizer renders the recorded prompt and reply ids; the upstream is asked for
    ``served_model``, or else the model name each harness request carries.
    ``formats``: the tool and reasoning format names the scripted engine writes replies in
    (default: the model family's).
    """
    if kind == "scripted":
        from openforge.engines.scripted import ScriptedEngine, ScriptError

        if script is None:
            _die(fail, "--engine scripted needs --script FILE (JSONL replies)")
        try:
            return ScriptedEngine.for_model(
                script,
                model_dir,
                max_context=max_context,
                tool_format=formats[0],
                reasoning_format=formats[1],
            )
        except ScriptError as exc:
            _die(fail, f"--script: {exc}")
    try:
        from openforge.engines.registry import create_engine
    except ImportError:
        _die(fail, f"--engine {kind} is not available in this build (no engines.registry)")
    if kind == "upstream" and not urls:
        _die(fail, "--engine upstream needs --url BASE_URL (e.g. https://api.openai.com/v1)")
    # The upstream must not be asked for our tokenizer's directory as its model name.
    model = "" if kind == "upstream" else model_dir
    try:
        return create_engine(
            kind,
            model=model,
            urls=urls,
            api=api,
            max_context=max_context,
            served_model=served_model,
        )
    except Exception as exc:
        _die(fail, f"--engine {kind}: {exc}")


def build_role_engine(
    option: str, spec: str, default_model: str, fail: Fail
) -> tuple[Engine | TextEngine, str]:
    """The engine an ``--judge-engine`` / ``--user-engine`` SPEC names (see
    :data:`ENGINE_SPEC_HELP`), and the model directory that renders its calls.

    ``scripted:judge.jsonl`` replays replies; ``local:smollm2-135m`` runs a model in-process;
    ``vllm:http://h:8000?served=qwen`` and ``upstream:https://api.openai.com/v1?served=gpt-4o``
    reach a server (an upstream's key comes from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``).
    """

    def spec_fail(message: str) -> None:
        fail(f"{option} {spec}: {message}")

    head, _, query = spec.partition("?")
    kind, _, arg = head.partition(":")
    if kind not in ("scripted", "local", "vllm", "sglang", "upstream"):
        _die(spec_fail, f"unknown engine kind {kind!r}; the form is {ENGINE_SPEC_HELP}")
    options: dict[str, str] = {}
    for pair in filter(None, query.split("&")):
        key, sep, value = pair.partition("=")
        if not sep or key not in _SPEC_KEYS:
            _die(spec_fail, f"{pair!r}: expected KEY=VALUE with KEY one of {', '.join(_SPEC_KEYS)}")
        options[key] = value
    try:
        max_context = int(options["max_context"]) if "max_context" in options else None
    except ValueError:
        _die(spec_fail, f"max_context must be a whole number, not {options['max_context']!r}")
    if kind == "local" and arg:
        options.setdefault("model", arg)
    model_dir = resolve_model_dir(options.get("model", default_model), spec_fail)
    if kind in ("vllm", "sglang", "upstream") and not arg:
        _die(spec_fail, f"{kind} needs a URL: {kind}:URL")
    if kind == "scripted" and not arg:
        _die(spec_fail, "scripted needs a replies file: scripted:FILE")
    urls = arg.split(",") if kind in ("vllm", "sglang", "upstream") else []
    api = options.get("api", "openai") if kind == "upstream" else None
    script = Path(arg) if kind == "scripted" else None
    engine = build_engine(
        kind, model_dir, script, urls, api, max_context, spec_fail, options.get("served", "")
    )
    return engine, model_dir


def role_engines(
    judge: str | None, user: str | None, default_model: str, fail: Fail
) -> dict[CallRole, RoleEngine]:
    """``--judge-engine`` and ``--user-engine``: the judge engine answers user-role keys too
    unless a user engine of its own is given."""
    out: dict[CallRole, RoleEngine] = {}
    if judge:
        engine, model = build_role_engine("--judge-engine", judge, default_model, fail)
        out[CallRole.JUDGE] = out[CallRole.USER] = RoleEngine(engine, model)
    if user:
        engine, model = build_role_engine("--user-engine", user, default_model, fail)
        out[CallRole.USER] = RoleEngine(engine, model)
    return out
