"""The reward-hack monitor: rules over what a rollout's policy did, flagging shortcuts.

RL pushes a policy towards whatever raised its reward once, so a shortcut it stumbled on
(reading the verifier, planting a ``.pth`` hook, forging a page's reward) must be seen
and kept out of training, even where the sandbox stopped it from paying off. The monitor
reads two records of a rollout:

* its recorded calls (the store): each policy call's answer (its tool calls, its text) and
  the tool results its prompt carried back;
* the harness's own transcript (``Harness.collect``): its tool calls, text and results, as
  its adapter decoded them (:class:`~openforge.tasks.transcript.Transcript`), or, for the
  GUI agents, in the form they write (the built-in agents' ``steps``, Browser-Use's
  ``history``).

Both are turned into :class:`Event` s and every :class:`Rule` is tried on every event; a
rule that matches gives the rollout one :class:`~openforge.store.schemas.Flag` (the first
match's place and text). The rules are data: ``monitor_rules.toml`` beside this module
holds the defaults, and a user's file of the same form adds, replaces or disables rules
(:func:`load_rules`). Where it runs: the orchestrator, once a rollout is finished
(``rollouts/runner.py``, flags recorded through the admin API), and
``openforge traces flag`` over an existing store.
"""

from __future__ import annotations

import enum
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from openforge.store.schemas import CallRecord, CallRole, Flag, FlagSeverity
from openforge.tasks.transcript import Transcript

__all__ = [
    "DEFAULT_RULES",
    "CallContent",
    "Event",
    "EventKind",
    "Rule",
    "RuleError",
    "RuleSet",
    "call_events",
    "load_rules",
    "parse_rules",
    "scan",
    "transcript_events",
]

DEFAULT_RULES = Path(__file__).with_name("monitor_rules.toml")
_EVIDENCE = 160  # characters of matched text a flag keeps
_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
_RULE_KEYS = frozenset(
    {"id", "description", "severity", "tool", "arguments", "keys", "text", "result"}
)
_FILE_KEYS = frozenset({"rule", "disable"})


class RuleError(ValueError):
    """A rule file that cannot be used; the message names the file and the field."""


class EventKind(enum.StrEnum):
    TOOL_CALL = "tool_call"  # a tool the policy called, with its arguments
    TEXT = "text"  # the policy's own text (a GUI agent's written action, its answer)
    TOOL_RESULT = "tool_result"  # what a tool answered


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a rollout's record shows: ``where`` is ``call 3`` or ``transcript turn 5``;
    ``arguments`` holds a tool call's string values as (name of the innermost key, value)."""

    kind: EventKind
    where: str
    tool: str = ""
    arguments: tuple[tuple[str, str], ...] = ()
    text: str = ""


@dataclass(frozen=True, slots=True)
class Rule:
    """A shortcut described as patterns (see ``monitor_rules.toml`` for each field)."""

    id: str
    description: str
    severity: FlagSeverity
    tool: re.Pattern[str] | None = None
    arguments: re.Pattern[str] | None = None
    keys: re.Pattern[str] | None = None
    text: re.Pattern[str] | None = None
    result: re.Pattern[str] | None = None

    def match(self, event: Event) -> str | None:
        """The evidence (the matched text, cut short) when this rule matches ``event``."""
        if event.kind is EventKind.TEXT:
            return _found(self.text, event.text)
        if self.tool is not None and not self.tool.fullmatch(event.tool):
            return None
        if event.kind is EventKind.TOOL_RESULT:
            found = _found(self.result, event.text)
            return None if found is None else f"{event.tool}: {found}"
        if self.result is not None or (self.tool is None and self.arguments is None):
            return None
        if self.arguments is None:  # the tool alone is the shortcut: show what it was given
            given = " ".join(" ".join(v for _, v in event.arguments).split())
            return (
                f"{event.tool}: {given[:_EVIDENCE]}" if given else f"{event.tool}: (no arguments)"
            )
        for key, value in event.arguments:
            if self.keys is not None and not self.keys.fullmatch(key):
                continue
            found = _found(self.arguments, value)
            if found is not None:
                return f"{event.tool}: {found}"
        return None


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules in force and the files they came from (defaults first)."""

    rules: tuple[Rule, ...]
    sources: tuple[str, ...] = ()
    disabled: frozenset[str] = field(default_factory=frozenset)

    def ids(self) -> list[str]:
        return [r.id for r in self.rules]


def _found(pattern: re.Pattern[str] | None, text: str) -> str | None:
    if pattern is None or not text:
        return None
    m = pattern.search(text)
    if m is None:
        return None
    start = max(0, m.start() - _EVIDENCE // 2)
    snippet = text[start : start + _EVIDENCE]
    snippet = ("…" if start else "") + snippet + ("…" if start + _EVIDENCE < len(text) else "")
    return " ".join(snippet.split())


# -- rule files ------------------------------------------------------------------------


def _regex(entry: Mapping[str, Any], name: str, where: str) -> re.Pattern[str] | None:
    value = entry.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise RuleError(f"{where}.{name}: must be a non-empty string (a regular expression)")
    try:
        return re.compile(value)
    except re.error as exc:
        raise RuleError(f"{where}.{name}: not a valid regular expression: {exc}") from None


def _rule(entry: Any, where: str) -> Rule:
    if not isinstance(entry, dict):
        raise RuleError(f"{where}: must be a table ([[rule]] with id, severity, …)")
    rule_id = entry.get("id")
    if not isinstance(rule_id, str) or not _ID.fullmatch(rule_id):
        raise RuleError(f"{where}.id: must be lower-case letters, digits and '-', got {rule_id!r}")
    where = f"{where} ({rule_id})"
    unknown = sorted(set(entry) - _RULE_KEYS)
    if unknown:
        allowed = ", ".join(sorted(_RULE_KEYS))
        raise RuleError(f"{where}.{unknown[0]}: unknown field; a rule has {allowed}")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise RuleError(f"{where}.description: must be a string")
    try:
        severity = FlagSeverity(str(entry.get("severity")))
    except ValueError:
        allowed = ", ".join(str(s) for s in FlagSeverity)
        raise RuleError(f"{where}.severity: must be one of {allowed}") from None
    patterns = {k: _regex(entry, k, where) for k in ("tool", "arguments", "keys", "text", "result")}
    if patterns["result"] is not None and patterns["arguments"] is not None:
        raise RuleError(
            f"{where}.result: a rule matches tool calls (arguments) or tool results (result), "
            "not both; make it two rules"
        )
    if patterns["keys"] is not None and patterns["arguments"] is None:
        raise RuleError(f"{where}.keys: names the arguments `arguments` looks at; give arguments")
    if not any(patterns[k] for k in ("tool", "arguments", "text", "result")):
        raise RuleError(f"{where}: matches nothing; give tool, arguments, text or result")
    return Rule(rule_id, description, severity, **patterns)


def parse_rules(text: str, source: str) -> tuple[list[Rule], list[str]]:
    """The rules of a rule file's ``text`` and the ids it disables; raises :class:`RuleError`
    naming ``source`` and the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{source}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - _FILE_KEYS)
    if unknown:
        raise RuleError(
            f"{source}: {unknown[0]}: unknown field; a rule file has [[rule]] tables and disable"
        )
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        raise RuleError(f"{source}: rule: must be an array of tables ([[rule]])")
    rules = [_rule(e, f"{source}: rule[{i}]") for i, e in enumerate(entries)]
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise RuleError(f"{source}: rule id {r.id!r} is given twice")
        seen.add(r.id)
    disabled = data.get("disable", [])
    if not isinstance(disabled, list) or not all(isinstance(d, str) for d in disabled):
        raise RuleError(f"{source}: disable: must be a list of rule ids")
    return rules, list(disabled)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError(f"{path}: cannot read the rule file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise RuleError(f"{path}: the rule file is not UTF-8 text") from None


def load_rules(user_file: str | Path | None = None) -> RuleSet:
    """The default rules, with ``user_file``'s rules added (a rule with a default's id
    replaces it) and its ``disable`` list turned off. An id in ``disable`` that no rule
    has is an error (a typo would otherwise leave the rule on)."""
    rules, _ = parse_rules(_read(DEFAULT_RULES), str(DEFAULT_RULES))
    sources = [str(DEFAULT_RULES)]
    disabled: list[str] = []
    if user_file is not None:
        path = Path(user_file)
        added, disabled = parse_rules(_read(path), str(path))
        sources.append(str(path))
        by_id = {r.id: r for r in rules}
        by_id.update((r.id, r) for r in added)
        rules = list(by_id.values())
        missing = sorted(set(disabled) - set(by_id))
        if missing:
            raise RuleError(f"{path}: disable: no rule has the id {missing[0]!r}")
    kept = tuple(r for r in rules if r.id not in disabled)
    return RuleSet(kept, tuple(sources), frozenset(disabled))


# -- events ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallContent:
    """What the monitor reads of one recorded call: its place, role, canonical conversation
    (the prompt, with the tool results it carried back) and completion (its answer)."""

    seq: int
    role: str
    conversation: Mapping[str, Any]
    completion: Mapping[str, Any]

    @classmethod
    def of(cls, call: CallRecord) -> CallContent:
        return cls(call.seq, str(call.role), call.conversation, call.completion)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CallContent:
        """A call as ``GET /admin/rollouts/<id>?content=1`` lists it."""
        conversation, completion = d.get("conversation"), d.get("completion")
        return cls(
            int(d.get("seq") or 0),
            str(d.get("role") or CallRole.POLICY),
            conversation if isinstance(conversation, dict) else {},
            completion if isinstance(completion, dict) else {},
        )


def _leaves(value: Any, key: str) -> Iterator[tuple[str, str]]:
    """Every string in an arguments value with the name of its innermost key."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v, key)


def _arguments(raw: Any) -> tuple[tuple[str, str], ...]:
    """A tool call's arguments (JSON text as generated, or an object) as leaves; text that
    is not a JSON object is one leaf named ``_raw``."""
    if isinstance(raw, str):
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return (("_raw", raw),)
        raw = parsed if isinstance(parsed, dict) else {"_raw": raw}
    return tuple(_leaves(raw, "_raw"))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def call_events(calls: Iterable[CallContent]) -> list[Event]:
    """The policy's calls as events, in ``seq`` order: each answer's tool calls and text,
    and each tool result once (the first prompt that carried it back). Calls made with a
    judge's or simulated user's key are the grader's, not the policy's: left out."""
    out: list[Event] = []
    seen: set[tuple[str, str]] = set()
    for call in sorted(calls, key=lambda c: c.seq):
        if call.role in (CallRole.JUDGE, CallRole.USER):
            continue
        where = f"call {call.seq}"
        names: dict[str, str] = {}
        for message in call.conversation.get("messages") or []:
            if not isinstance(message, dict):
                continue
            for tc in message.get("tool_calls") or []:
                if isinstance(tc, dict):
                    names[str(tc.get("id"))] = str(tc.get("name") or "")
            if message.get("role") != "tool":
                continue
            cid = str(message.get("tool_call_id") or "")
            text = _content_text(message.get("content"))
            if (cid, text) in seen:
                continue
            seen.add((cid, text))
            out.append(Event(EventKind.TOOL_RESULT, where, names.get(cid, ""), text=text))
        answer = call.completion.get("text")
        if isinstance(answer, str) and answer.strip():
            out.append(Event(EventKind.TEXT, where, text=answer))
        for tc in call.completion.get("tool_calls") or []:
            if isinstance(tc, dict):
                name = str(tc.get("name") or "")
                out.append(Event(EventKind.TOOL_CALL, where, name, _arguments(tc.get("arguments"))))
    return out


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _step_events(steps: Sequence[Any]) -> list[Event]:
    """The built-in browser and computer agents' ``steps``: a reply, then an action (the
    browser agent's ``{"action": verb, …}``) or a tool call (``tool`` with ``arguments``),
    then what it did."""
    out: list[Event] = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        where = f"transcript step {i}"
        if isinstance(step.get("reply"), str) and step["reply"].strip():
            out.append(Event(EventKind.TEXT, where, text=step["reply"]))
        action = step.get("action")
        if isinstance(action, dict) and isinstance(action.get("action"), str):
            args = {k: v for k, v in action.items() if k != "action"}
            out.append(Event(EventKind.TOOL_CALL, where, action["action"], _arguments(args)))
        elif isinstance(step.get("tool"), str):
            out.append(
                Event(EventKind.TOOL_CALL, where, step["tool"], _arguments(step.get("arguments")))
            )
        if step.get("result") is not None:
            tool = step.get("tool") or (action or {}).get("action") or ""
            text = _json_text(step["result"])
            out.append(Event(EventKind.TOOL_RESULT, where, str(tool), text=text))
    return out


def _history_events(history: Sequence[Any]) -> list[Event]:
    """Browser-Use's ``AgentHistoryList``: each step's model output (actions as
    ``{name: params}``) and the results of its actions."""
    out: list[Event] = []
    for i, item in enumerate(history):
        if not isinstance(item, dict):
            continue
        where = f"transcript step {i}"
        output = item.get("model_output")
        if isinstance(output, dict):
            for action in output.get("action") or []:
                if isinstance(action, dict):
                    for name, params in action.items():
                        out.append(Event(EventKind.TOOL_CALL, where, str(name), _arguments(params)))
        for result in item.get("result") or []:
            if isinstance(result, dict):
                text = result.get("extracted_content") or result.get("error") or ""
                out.append(Event(EventKind.TOOL_RESULT, where, text=str(text)))
    return out


def transcript_events(transcript: Transcript | None) -> list[Event]:
    """The harness transcript's tool calls, text and tool results as events (none for a
    harness that wrote none, or in a form not read here)."""
    if transcript is None:
        return []
    out: list[Event] = []
    for i, turn in enumerate(transcript.turns):
        where = f"transcript turn {i}"
        if turn.role == "assistant":
            if turn.text.strip():
                out.append(Event(EventKind.TEXT, where, text=turn.text))
            for use in turn.tool_uses:
                out.append(Event(EventKind.TOOL_CALL, where, use.name, _arguments(use.arguments)))
        elif turn.role == "tool":
            out.append(Event(EventKind.TOOL_RESULT, where, turn.tool_name, text=turn.text))
    raw = transcript.raw
    if out or not isinstance(raw, Mapping):
        return out
    if isinstance(raw.get("steps"), list):
        return _step_events(raw["steps"])
    history = raw.get("history")
    if isinstance(history, dict):  # the history file itself, kept under its own key
        history = history.get("history")
    if isinstance(history, list):
        return _history_events(history)
    return []


def scan(
    rules: RuleSet,
    calls: Iterable[CallContent] = (),
    transcript: Transcript | None = None,
) -> list[Flag]:
    """One flag per rule that matches any event of the calls or the transcript (the calls
    first), most severe first."""
    events = call_events(calls) + transcript_events(transcript)
    flags: list[Flag] = []
    for rule in rules.rules:
        for event in events:
            evidence = rule.match(event)
            if evidence is not None:
                flags.append(Flag(rule.id, rule.severity, event.where, evidence))
                break
    flags.sort(key=lambda f: (-f.severity.rank, f.rule))
    return flags
