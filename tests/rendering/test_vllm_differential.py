"""Differential tests: OpenForge's family parsers against vLLM's own, on the same ids.

For each family, one corpus — hand-written replies, calls to the recorded harnesses'
tools (Claude Code's, from the fixtures), Hypothesis-generated names and arguments (quotes,
unicode, nesting, several calls, text around them) and those replies cut short — is
parsed by OpenForge in-process and by vLLM 0.32's parser (``ParserManager.get_parser``,
what its serving layer uses) in a subprocess of the vLLM environment's Python
(``.venv-vllm`` beside this checkout; ``tests/rendering/vllm_reference.py``). Names,
argument objects, content and reasoning must agree, whole and streamed in the same random
chunking, except where a case states how and why OpenForge differs on purpose.

Whitespace at the edges of content and reasoning is compared stripped: OpenForge strips
it around reasoning and call regions (rendering/parsing.py), vLLM keeps what the template
put there.

Set ``OPENFORGE_FAMILY_MODEL`` to a real model directory to run the same corpus through
its own tokenizer (docs/rendering.md).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforge.conversation import Conversation, Message, TextPart, ToolCall, ToolSpec
from openforge.models.tiny_families import build_tiny_family
from openforge.rendering import Renderer, load_tokenizer
from openforge.rendering.families.catalog import resolve_family
from openforge.rendering.parsing import ParsedOutput

from .family_cases import CALLS, CLEAN, MARKERS, schema_tools, typed_consistently

CHECKOUT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(
    os.environ.get("OPENFORGE_VLLM_PYTHON") or CHECKOUT / ".venv-vllm" / "bin" / "python"
)
# Generated replies per family (more finds more; CI runs the default).
EXAMPLES = int(os.environ.get("OPENFORGE_DIFF_EXAMPLES") or 25)
# A file to append, per deliberate difference, what each side made of it (for docs).
REPORT = os.environ.get("OPENFORGE_DIFF_REPORT")
FIXTURES = [
    CHECKOUT.parent / "shared" / "fixtures" / "harness-requests",
    CHECKOUT / "tests" / "dialects" / "fixtures",
]

# family -> (tiny model, tool format, vLLM tool parser, vLLM reasoning parser)
THINKING = "deepseek_v31_thinking"
FAMILIES: dict[str, tuple[str, str, str, str | None]] = {
    "hermes": ("qwen3_coder", "hermes", "hermes", "qwen3"),
    "qwen3_coder": ("qwen3_coder", "qwen3_coder", "qwen3_coder", "qwen3"),
    "kimi_k2": ("kimi_k2", "kimi_k2", "kimi_k2", "kimi_k2"),
    # vLLM's deepseek_v3 reasoning parser thinks only when the request asks (thinking in
    # chat_template_kwargs); this corpus is the non-thinking mode, so no reasoning parser.
    "deepseek_v31": ("deepseek_v31", "deepseek_v31", "deepseek_v31", None),
    # Thinking mode: the generation prompt ends "<think>", the reply "reasoning</think>…".
    THINKING: ("deepseek_v31", "deepseek_v31", "deepseek_v31", "deepseek_v3"),
    "llama3_json": ("llama3_json", "llama3_json", "llama3_json", None),
    "mistral": ("mistral", "mistral", "mistral", "mistral"),
    "glm45": ("glm45", "glm45", "glm45", "glm45"),
    # GLM-4.7's shape (no newlines between the tags), written with the GLM tokenizer
    "glm47": ("glm45", "glm47", "glm47", "glm45"),
}
# gpt-oss is not here: vLLM's Harmony parser reads ids through openai_harmony's o200k
# encoding, whose vocabulary file cannot be had offline and which cannot read a tiny
# tokenizer's ids; the Harmony family is checked against its template and the SDKs only.


def _user(text: str) -> Message:
    return Message(role="user", content=[TextPart(text)])


@dataclass
class Case:
    label: str
    text: str = ""
    reasoning: str | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    raw: str | None = None  # output written out instead of a rendered reply
    cut: bool = False  # the reply cut short (max_tokens)
    differs: str = ""  # why OpenForge deliberately parses this differently from vLLM
    ids: list[int] = field(default_factory=list)
    chunks: list[list[int]] = field(default_factory=list)
    stop: list[int] = field(default_factory=list)  # the stop token that ended it, if any


def _fixture_tools() -> list[ToolSpec]:
    for root in FIXTURES:
        path = root / "claude-code-2.1.197.messages.first-call.json"
        if path.is_file():
            body = json.loads(path.read_text())
            return [ToolSpec(t["name"], "", t["input_schema"]) for t in body["tools"]]
    pytest.fail("the recorded Claude Code request is in no fixtures directory")


_HAND: list[Case] = [
    Case("text only", "Hello there, nothing to call."),
    Case("one call", calls=[("bash", {"command": "ls -la"})]),
    Case("text then call", "Let me look.", calls=[("bash", {"command": "cat a.txt"})]),
    Case(
        "quotes, unicode, nesting",
        "Écrire 日本 🤖",
        calls=[("write", {"path": 'a "b".txt', "body": {"lines": ["x", "y'z"], "n": 2}})],
    ),
    Case(
        "two calls",
        calls=[("read", {"path": "a.txt"}), ("read", {"path": "b.txt"})],
    ),
    Case("reasoning and call", "", "Check the dir first.", [("bash", {"command": "pwd"})]),
]


def _fixture_cases(tools: list[ToolSpec]) -> list[Case]:
    by = {t.name: t for t in tools}
    return (
        [
            Case("Claude Code Bash", calls=[("Bash", {"command": "git status", "timeout": 60000})]),
            Case(
                "Claude Code Edit",
                "Fixing the typo.",
                calls=[
                    ("Edit", {"file_path": "/w/a.py", "old_string": "x = 1", "new_string": "x = 2"})
                ],
            ),
        ]
        if {"Bash", "Edit"} <= set(by)
        else []
    )


def _generated(n: int) -> list[Case]:
    found: list[Case] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(text=CLEAN, reasoning=st.none() | CLEAN, calls=CALLS)
    def collect(text: str, reasoning: str | None, calls: list[tuple[str, dict[str, Any]]]) -> None:
        if text.startswith(MARKERS) or (reasoning or "").startswith(MARKERS):
            return
        if typed_consistently(calls):
            found.append(Case(f"generated {len(found)}", text, reasoning, calls))

    collect()
    return found


def _malformed(family: str) -> list[Case]:
    raw = {
        "hermes": "Try.<tool_call>{not json}</tool_call>",
        "qwen3_coder": "Try.\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n"
        "</tool_call>",
        "kimi_k2": "Try.<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        "<|tool_call_argument_begin|>{broken<|tool_call_end|><|tool_calls_section_end|>",
        "deepseek_v31": "Try.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{broken"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "llama3_json": '{"name": "f", "parameters": {"a": 1}} and then some words',
        "mistral": "Try.[TOOL_CALLS]f[ARGS]{broken",
        "glm45": "Try.\n<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>",
        "glm47": "Try.<tool_call>f<arg_key>a</arg_key></tool_call>",
    }[family]
    why = "a malformed call stays visible as text and is counted; vLLM drops or mangles it"
    return [Case("malformed call", raw=raw, differs=why)]


def _build(family: str, r: Renderer, tools: list[ToolSpec]) -> list[Case]:
    # Fresh copies: each family fills in its own ids.
    cases = [
        replace(c, calls=list(c.calls), ids=[], chunks=[])
        for c in (*_HAND, *_fixture_cases(tools), *_generated(EXAMPLES))
    ]
    if family == "llama3_json":
        # Llama 3's template writes no text beside a call; OpenForge reads one written
        # after the text as <|python_tag|>{...}. vLLM's whole parse drops that text, and
        # its stream parse sees no call at all (its calls must open the output).
        for c in cases:
            if c.text and c.calls:
                c.differs = "text before a Llama 3 call: OpenForge keeps both"
    if r.family.reasoning is None or family == "deepseek_v31":
        for c in cases:
            c.reasoning = None
    cut = [
        Case(f"{c.label}, cut", c.text, c.reasoning, c.calls, cut=True,
             differs="cut short: OpenForge shows a partial call as text (counted)")
        for c in cases[:12] if c.calls
    ]  # fmt: skip
    cases += cut + ([] if family == THINKING else _malformed(family))
    if family == THINKING:
        for c in cases:
            c.reasoning = c.reasoning or "Think it over."
    rng = random.Random(family)
    for c in cases:
        if c.raw is not None:
            ids = r.tokenizer.encode_template(c.raw)
        else:
            calls = [ToolCall(f"c{i}", n, json.dumps(a)) for i, (n, a) in enumerate(c.calls)]
            if family == THINKING:  # the prompt wrote <think>: the reply starts inside
                think = [(c.reasoning or "", False), ("</think>", True)]
                ids = r.encode_pieces(think) + r.encode_reply(c.text, None, calls)
            else:
                ids = r.encode_reply(c.text, c.reasoning, calls)
            # The stop token is not part of the text vLLM parses; its stream ends with it.
            ids, c.stop = ids[:-1], ids[-1:]
        if c.cut:
            ids, c.stop = ids[: max(1, len(ids) * 2 // 3)], []
        c.ids = ids
        at = 0
        while at < len(ids):
            k = rng.randint(1, 5)
            c.chunks.append(ids[at : at + k])
            at += k
    return cases


Result = tuple[str, str, list[tuple[str, Any]]]


def _ours(parsed: ParsedOutput) -> Result:
    calls = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
    return parsed.text.strip(), (parsed.reasoning or "").strip(), calls


def _theirs(result: dict[str, Any]) -> Result | str:
    if "error" in result:
        return str(result["error"])
    calls = []
    for name, args in result["calls"]:
        try:
            calls.append((name, json.loads(args)))
        except ValueError:
            calls.append((name, args))
    return result["content"].strip(), (result["reasoning"] or "").strip(), calls


# vLLM's deepseek_v31 stream loses the text that shares a delta with a marker token (the
# content before <｜tool▁calls▁begin｜>, an argument's end before <｜tool▁call▁end｜>): with
# several tokens per delta (speculative decoding, or a stream read in bursts) its calls'
# arguments come out cut. OpenForge's stream does not depend on how ids are grouped; the
# comparison for this family uses vLLM's one-token-per-delta stream ("tokens") instead.
# Its reasoning parser, likewise, leaves "</think>" in the content when the tag shares a
# delta with the text after it.
STREAM_MODE = {"deepseek_v31": "tokens", THINKING: "tokens"}
# vLLM's hermes stream holds back text that could begin "<tool_call>" and never releases it
# when the output ends there: a reply ending in "<" loses it. OpenForge releases held-back
# text at the end (flush), so its content is vLLM's plus that tail.
HELD_TAIL = {"hermes": "<tool_call>"}


# vLLM's llama3_json stream sends no argument text for a call whose arguments are {}: the
# call arrives with arguments "" (not JSON). OpenForge sends the "{}" the model wrote.
EMPTY_ARGS_STREAM = {"llama3_json"}
# Qwen3-Coder's template writes a null argument as Python does, "None" (``| string``); for
# a parameter the schema types null OpenForge reads it back as null, vLLM 0.32's qwen3
# parser keeps the string "None" (its earlier parser read it as null, as OpenForge does).
NONE_AS_TEXT = {"qwen3_coder"}


def _same_but_none(ours: Any, theirs: Any) -> bool:
    """Equal, except where ours is null and theirs the text "None"."""
    if ours is None and theirs == "None":
        return True
    if isinstance(ours, dict) and isinstance(theirs, dict) and ours.keys() == theirs.keys():
        return all(_same_but_none(ours[k], theirs[k]) for k in ours)
    if (
        isinstance(ours, list | tuple)
        and isinstance(theirs, list | tuple)
        and len(ours) == len(theirs)
    ):
        return all(_same_but_none(a, b) for a, b in zip(ours, theirs, strict=True))
    return bool(ours == theirs)


def _explained(family: str, mode: str, ours: Result, theirs: Result | str) -> bool:
    """Whether ``theirs`` differs from ``ours`` only as a stated vLLM quirk above."""
    if isinstance(theirs, str):
        return False
    if mode != "whole" and _lost_tail(family, ours, theirs):
        return True
    if mode != "whole" and family in EMPTY_ARGS_STREAM:
        calls = [(n, {} if a == "" else a) for n, a in theirs[2]]
        return (theirs[0], theirs[1], calls) == ours
    if family in NONE_AS_TEXT:
        return theirs[:2] == ours[:2] and _same_but_none(ours[2], theirs[2])
    return False


def _lost_tail(family: str, ours: Result, theirs: Result | str) -> bool:
    """Whether ``theirs`` is ``ours`` less a tail vLLM's stream never released."""
    tag = HELD_TAIL.get(family)
    if tag is None or isinstance(theirs, str) or theirs[1:] != ours[1:]:
        return False
    tail = ours[0][len(theirs[0]) :]
    return ours[0].startswith(theirs[0]) and 0 < len(tail) < len(tag) and tag.startswith(tail)


@dataclass
class FamilyRun:
    renderer: Renderer
    tools: list[ToolSpec]
    prompt: list[int]
    cases: list[Case]
    vllm: list[dict[str, Any]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FamilyRun]:
    if not VLLM_PYTHON.is_file():
        pytest.skip(
            f"vLLM's CPU build is not installed in {VLLM_PYTHON.parent.parent} "
            "(the differential tests' reference; CI installs it)"
        )
    root = tmp_path_factory.mktemp("vllm-diff")
    fixture_tools = _fixture_tools()
    made: dict[str, FamilyRun] = {}
    specs = []
    for family, (tiny, tool_format, tool_parser, reasoning_parser) in FAMILIES.items():
        real = os.environ.get("OPENFORGE_FAMILY_MODEL")
        model = real or str(build_tiny_family(tiny, root / tiny))
        tok = load_tokenizer(model)
        if real and resolve_family(tok).tools.name != tool_format:
            continue  # a real model directory is checked in its own family only
        r = Renderer(tok, family=resolve_family(tok, tool_format))
        cases = _build(family, r, fixture_tools)
        calls = [call for c in cases for call in c.calls]
        tools = [*schema_tools(calls), *fixture_tools]
        prompt = r.render(Conversation([_user("List the files.")], tools)).ids
        if family == THINKING:  # the template's thinking=True generation prompt
            assert tok.special_text(prompt[-1]) == "</think>"
            prompt = [*prompt[:-1], tok.token_id("<think>") or -1]
        made[family] = FamilyRun(r, tools, prompt, cases, [])
        specs.append({
            "model": model,
            "tool_parser": tool_parser,
            "reasoning_parser": reasoning_parser,
            "tools": [
                {"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.parameters}}
                for t in tools
            ],
            "prompt": prompt,
            "cases": [
                {"ids": c.ids, "chunks": c.chunks, "stop": c.stop,
                 "thinking": c.reasoning is not None}
                for c in cases
            ],
        })  # fmt: skip
    done = subprocess.run(
        [str(VLLM_PYTHON), str(Path(__file__).with_name("vllm_reference.py"))],
        input=json.dumps(specs),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for family, results in zip(made, json.loads(done.stdout), strict=True):
        made[family].vllm = results
    return made


def _parse(run: FamilyRun, case: Case) -> tuple[ParsedOutput, ParsedOutput]:
    r = run.renderer
    whole = r.parse(case.ids, tools=run.tools, prompt_ids=run.prompt)
    parser = r.stream_parser(tools=run.tools, prompt_ids=run.prompt)
    for chunk in case.chunks:
        parser.feed(chunk)
    return whole, parser.finish()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_parses_agree_with_vllm(runs: dict[str, FamilyRun], family: str) -> None:
    if family not in runs:
        pytest.skip(f"OPENFORGE_FAMILY_MODEL is not a {family} model")
    run = runs[family]
    disagreements = []
    report: list[dict[str, Any]] = []
    for case, theirs in zip(run.cases, run.vllm, strict=True):
        whole, streamed = _parse(run, case)
        ours = _ours(whole)
        assert _ours(streamed) == ours, case.label  # OpenForge's stream = its whole parse
        if case.differs and REPORT:
            report.append(
                {
                    "family": family,
                    "case": case.label,
                    "why": case.differs,
                    "openforge": ours,
                    "vllm": {m: _theirs(theirs[m]) for m in theirs},
                }
            )
        if case.differs:
            _check_own_rules(case, whole)
            continue
        for mode in ("whole", STREAM_MODE.get(family, "stream"), "tokens"):
            seen = _theirs(theirs[mode])
            if seen != ours and not _explained(family, mode, ours, seen):
                disagreements.append((case.label, mode, ours, _theirs(theirs[mode])))
    if REPORT:
        with Path(REPORT).open("a") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in report)
    assert not disagreements, "\n".join(map(repr, disagreements))


def _check_own_rules(case: Case, parsed: ParsedOutput) -> None:
    """What OpenForge promises where it parts from vLLM on purpose."""
    if case.raw is not None:  # malformed: counted, and every character of it still shown
        assert parsed.malformed == 1 and not parsed.tool_calls, case.label
        assert "".join(parsed.text.split()) == "".join(case.raw.split()), case.label
    elif case.cut:  # a partial call is never a call: calls are a prefix of the whole's
        assert [c.name for c in parsed.tool_calls] == [n for n, _ in case.calls][
            : len(parsed.tool_calls)
        ], case.label
    else:  # Llama 3 text beside a call: both kept
        assert parsed.text == case.text and len(parsed.tool_calls) == len(case.calls)
