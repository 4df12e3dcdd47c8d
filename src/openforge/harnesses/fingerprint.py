"""Harness fingerprints: the call pattern of one pinned harness version, stabilised and hashed.

A fingerprint is what the gateway saw of a harness solving claw-mini's ``hello-file``
with a scripted engine: per call the endpoint and dialect, streaming, the request's
top-level keys, each tool's name and schema hash, the system prompt's hash and length,
and the identifying headers. Volatile parts (dates, ids, kernel versions, session
headers) are replaced by placeholders first, so a re-run gives the same hash; a new
harness version that adds a tool, rewrites its prompt or changes its headers does not.

Stored as ``src/openforge/harnesses/fingerprints/NAME-VERSION.json``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from openforge.store.schemas import CallRecord

__all__ = [
    "FINGERPRINT_DIR",
    "compare",
    "fingerprint",
    "fingerprint_path",
    "harness_metadata",
    "load_fingerprint",
    "stabilise",
]

FINGERPRINT_DIR = Path(__file__).parent / "fingerprints"
ENDPOINTS = {
    "openai_chat": "POST /v1/chat/completions",
    "openai_responses": "POST /v1/responses",
    "anthropic": "POST /v1/messages",
}
# Fields of a fingerprint that describe rather than identify (not hashed).
_INFO = ("prompt_tokens", "prompt_chars", "status")
# Headers whose values change per run; their presence is kept, their value is not.
_VOLATILE_HEADERS = ("session", "request-id", "window-id", "turn-metadata", "conversation")
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_DAY = r"(?:[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d{2}"
_WEEKDAY = r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day"
_WEEKDAY_ABBR = r"(?:Mon|Tue|Tues|Wed|Thu|Thur|Thurs|Fri|Sat|Sun)\.?"
_UNIT = r"(?:second|sec|minute|min|hour|hr|day|week|month|year)s?"
# Order matters: whole timestamps before their parts, dates before the weekday that names
# them. Every form a harness may print the run's date or time in (ISO, RFC 2822, "December
# 1, 2026", "1 December 2026", "December 2026", numeric, weekdays, clock times, "3 days ago")
# becomes a placeholder, so a fingerprint does not change with the day it is recorded on.
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}"
            r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
        ),
        "<date>",
    ),
    (re.compile(rf"\b{_YEAR}/[01]?\d/[0-3]?\d\b"), "<date>"),
    (re.compile(rf"\b[0-3]?\d[/.][0-3]?\d[/.]{_YEAR}\b"), "<date>"),
    (re.compile(rf"\b{_MONTH} {_DAY},? {_YEAR}\b"), "<date>"),
    (re.compile(rf"\b{_DAY} (?:of )?{_MONTH},? {_YEAR}\b"), "<date>"),
    (re.compile(rf"\b{_MONTH},? {_YEAR}\b"), "<date>"),
    (re.compile(rf"\b{_MONTH} {_DAY}\b(?=,? (?:at )?\d{{1,2}}:\d{{2}})"), "<date>"),
    (
        re.compile(
            r"\b[0-2]?\d:[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:\s?[AaPp]\.?[Mm]\.?)?"
            r"(?:\s?(?:UTC|GMT|Z|[A-Z]{1,3}T|[+-]\d{2}:?\d{2}))?(?![\w:])"
        ),
        "<time>",
    ),
    (re.compile(rf"\b{_WEEKDAY}\b"), "<weekday>"),
    (re.compile(rf"\b{_WEEKDAY_ABBR},? (?=<date>|\d)"), "<weekday> "),
    (re.compile(rf"\b\d+ {_UNIT} ago\b"), "<relative>"),
    (re.compile(rf"\bin \d+ {_UNIT}\b"), "<relative>"),
    (re.compile(r"\b(Linux|Darwin) \d+\.\d+[\w.+-]*"), r"\1 <kernel>"),
    # A user-agent's "(OS VERSION; ARCH)" after "product/version" (Codex: "codex_exec/0.171.0
    # (Debian 12.0.0; x86_64)") names the host's distribution, not the harness: drop the OS,
    # keep the product version and the architecture.
    (re.compile(r"\b([\w.-]+/\d+\.\d+[\w.+-]*) \([^;()]+; ([^;()]+)\)"), r"\1 (<os>; \2)"),
    (re.compile(r"\b[0-9a-f]{16,}\b", re.I), "<hex>"),
    (re.compile(r"/tmp/[\w./-]+"), "<tmp>"),
    (re.compile(r"\b\d{10,13}\b"), "<epoch>"),
]


def stabilise(text: str) -> str:
    """``text`` with dates, ids, kernel and OS versions, scratch paths replaced by placeholders."""
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _stable_json(value: Any) -> Any:
    """``value`` with :func:`stabilise` applied to every string in it."""
    if isinstance(value, str):
        return stabilise(value)
    if isinstance(value, list):
        return [_stable_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _stable_json(v) for k, v in value.items()}
    return value


def _sha(value: Any) -> str:
    data = value if isinstance(value, bytes) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _text(p.get("text", "")) if isinstance(p, dict) else _text(p) for p in content
        )
    return ""


def _system(dialect: str, body: dict[str, Any]) -> str:
    """The system text: instructions and system/developer turns, in order."""
    parts: list[str] = []
    if dialect == "anthropic":
        parts.append(_text(body.get("system")))
    if dialect == "openai_responses":
        parts.append(_text(body.get("instructions")))
    items = body.get("messages") if dialect != "openai_responses" else body.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("role") in ("system", "developer"):
            parts.append(_text(item.get("content")))
    return "\n".join(p for p in parts if p)


def _tool_name(tool: dict[str, Any]) -> str:
    fn = tool.get("function")
    if isinstance(fn, dict) and "name" in fn:
        return str(fn["name"])
    return str(tool.get("name") or tool.get("type") or "?")


def _tools(body: dict[str, Any]) -> list[list[str]]:
    out = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            out.append([_tool_name(tool), _sha(_stable_json(tool))])
    return out


def _headers(headers: dict[str, Any]) -> dict[str, str]:
    out = {}
    for name, value in sorted(headers.items()):
        volatile = any(v in name for v in _VOLATILE_HEADERS)
        out[name] = "<volatile>" if volatile else stabilise(str(value))
    return out


def call_pattern(call: CallRecord) -> dict[str, Any]:
    """One call's fingerprint entry (hashed fields and ``_INFO`` fields)."""
    try:
        body = orjson.loads(call.raw_request) if call.raw_request else {}
    except orjson.JSONDecodeError:
        body = {}
    body = body if isinstance(body, dict) else {}
    system = stabilise(_system(call.dialect, body))
    return {
        "endpoint": ENDPOINTS.get(call.dialect, call.dialect),
        "dialect": call.dialect,
        "stream": bool(body.get("stream")),
        "request_keys": sorted(body),
        "tools": _tools(body),
        "system": {"sha256": _sha(system.encode()), "chars": len(system)},
        "headers": _headers(call.harness),
        "status": str(call.status),
        "prompt_tokens": len(call.prompt_ids),
        "prompt_chars": len(call.raw_request),
    }


def _hashed(pattern: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in pattern.items() if k not in _INFO}


def fingerprint(name: str, version: str, calls: Iterable[CallRecord]) -> dict[str, Any]:
    """The fingerprint of a run's calls (in arrival order), with its ``hash``."""
    patterns = [call_pattern(c) for c in sorted(calls, key=lambda c: c.seq)]
    hashed = [_hashed(p) for p in patterns]
    return {
        "harness": name,
        "version": version,
        "hash": _sha({"harness": name, "version": version, "calls": hashed}),
        "first_prompt_tokens": patterns[0]["prompt_tokens"] if patterns else 0,
        "calls": patterns,
    }


def fingerprint_path(name: str, version: str, root: Path = FINGERPRINT_DIR) -> Path:
    """Where the baseline for ``name`` at ``version`` is stored."""
    return root / f"{name}-{version}.json"


def load_fingerprint(
    name: str, version: str, root: Path = FINGERPRINT_DIR
) -> dict[str, Any] | None:
    """The stored baseline, or None if there is none."""
    path = fingerprint_path(name, version, root)
    if not path.is_file():
        return None
    data: dict[str, Any] = orjson.loads(path.read_bytes())
    return data


def harness_metadata(name: str, version: str) -> dict[str, Any]:
    """What every rollout records about its harness: name, version, baseline hash (or None)."""
    try:
        stored = load_fingerprint(name, version)
    except (OSError, orjson.JSONDecodeError):
        stored = None
    return {
        "harness": name,
        "harness_version": version,
        "harness_fingerprint": stored.get("hash") if stored else None,
    }


def _diff_call(i: int, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out: list[str] = []
    where = f"call {i}"
    for key in ("endpoint", "dialect", "stream", "request_keys"):
        if old.get(key) != new.get(key):
            out.append(f"{where}: {key} {old.get(key)!r} -> {new.get(key)!r}")
    old_tools = dict(map(tuple, old.get("tools", [])))
    new_tools = dict(map(tuple, new.get("tools", [])))
    for tool in sorted(set(new_tools) - set(old_tools)):
        out.append(f"{where}: tool added: {tool}")
    for tool in sorted(set(old_tools) - set(new_tools)):
        out.append(f"{where}: tool removed: {tool}")
    for tool in sorted(set(old_tools) & set(new_tools)):
        if old_tools[tool] != new_tools[tool]:
            out.append(f"{where}: tool schema changed: {tool}")
    if old.get("system") != new.get("system"):
        o, n = old.get("system", {}), new.get("system", {})
        out.append(f"{where}: system prompt changed ({o.get('chars')} -> {n.get('chars')} chars)")
    oh, nh = old.get("headers", {}), new.get("headers", {})
    for h in sorted(set(oh) | set(nh)):
        if oh.get(h) != nh.get(h):
            out.append(f"{where}: header {h}: {oh.get(h)!r} -> {nh.get(h)!r}")
    return out


def compare(baseline: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """What changed between two fingerprints, one line per change (empty: none)."""
    if baseline.get("hash") == fresh.get("hash"):
        return []
    out: list[str] = []
    old_calls, new_calls = baseline.get("calls", []), fresh.get("calls", [])
    if len(old_calls) != len(new_calls):
        out.append(f"number of calls {len(old_calls)} -> {len(new_calls)}")
    for i, (o, n) in enumerate(zip(old_calls, new_calls, strict=False)):
        out += _diff_call(i, o, n)
    if baseline.get("version") != fresh.get("version"):
        out.append(f"version {baseline.get('version')} -> {fresh.get('version')}")
    return out or ["the hash changed (no field-level difference found)"]
