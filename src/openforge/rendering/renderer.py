"""Incremental, token-exact prompt rendering under OpenForge's ChatML tool template.

A prompt is a list of segments, one per message (a run of tool results is one user
turn)::

    <|im_start|> role\\n{content} <|im_end|> \\n        (ids, text, id, text)

Each segment's text starts right after a special token and ends right before one, so
tokenizing segments apart gives the same ids as tokenizing the whole prompt: segments can
be cached. The system segment (system prompt + tools) is shared across rollouts in an LRU;
every other segment lives in the rollout's :class:`RolloutHistory`. An assistant message
that re-sends a reply the engine sampled in this rollout is rendered from the sampled ids,
so a call that continues the previous one extends its prompt + output exactly.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import orjson

from openforge.conversation import (
    Conversation,
    ImagePart,
    Message,
    ToolCall,
    ToolSpec,
    tools_json,
)
from openforge.rendering.chat_template import render_chat_template
from openforge.rendering.families.catalog import resolve_family
from openforge.rendering.families.family import ModelFamily, Piece
from openforge.rendering.hf_template import TemplateRenderer
from openforge.rendering.history import (
    DriftPoint,
    LastRender,
    RenderedPrompt,
    RolloutHistory,
    Segment,
    TurnKey,
    canonical_key,
    fast_key,
)
from openforge.rendering.parsing import IdFactory, OutputParser, ParsedOutput, StreamParser
from openforge.rendering.tokenizer import Tokenizer, TokenizerError
from openforge.rendering.toolformat import (
    IMAGE_PLACEHOLDER,
    canonical_arguments,
    content_text,
    reply_body,
    tool_results_text,
    tools_section,
)
from openforge.rendering.untracked import untracked
from openforge.rendering.vision import Vision

__all__ = ["RenderError", "Renderer"]

_ROLE = {"system": "system", "developer": "system", "user": "user", "tool": "user"}
# A turn's end (the index after its last message), its text and how many images it
# replaced, by the index of its first message: see Renderer._unit_text.
_Texts = dict[int, tuple[int, str, int]]


class RenderError(ValueError):
    """The conversation cannot be rendered (the message says which part and why)."""


# Segments of more ids than this are not kept in the shared cache (a harness's system
# prompt and tools are a few thousand; 64 Ki ids are ~250 KB of text).
_SHARED_MAX_IDS = 1 << 16


class _LRU:
    """A bounded cache shared by every rollout. Locked: the gateway renders very large
    requests on worker threads while others render on its event loop."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[Hashable, list[int]] = OrderedDict()
        self.lock = threading.Lock()
        # Entries' ids as JSON without brackets, made on first use (see ids_json); dropped
        # whenever their entry is replaced or evicted, so always the current entry's.
        self._json: dict[Hashable, bytes] = {}

    def get(self, key: Hashable) -> list[int] | None:
        with self.lock:
            found = self._d.get(key)
            if found is not None:
                self._d.move_to_end(key)
            return found

    def put(self, key: Hashable, ids: list[int]) -> None:
        if len(ids) > _SHARED_MAX_IDS:
            # A huge task (a 60 MB tool log) would be kept, key text and ids, long after
            # its rollout ended: the cache is for prompts many rollouts share.
            return
        with self.lock:
            self._d[key] = ids
            self._json.pop(key, None)
            if len(self._d) > self.size:
                gone, _ = self._d.popitem(last=False)
                self._json.pop(gone, None)

    def json(self, key: Hashable, ids: Sequence[int]) -> bytes | None:
        """``ids`` as JSON without brackets when they are this cache's entry for ``key``
        (made once per entry: a group's rollouts all send the same task); else None."""
        with self.lock:
            if self._d.get(key) is not ids:
                return None
            made = self._json.get(key)
            if made is None:
                made = self._json[key] = orjson.dumps(ids)[1:-1]
            return made


def _default_system(tok: Tokenizer, start: str, end: str) -> str | None:
    """The system prompt the model's template inserts when a conversation has none."""
    if not tok.chat_template:
        return None
    try:
        text = render_chat_template(tok.chat_template, [{"role": "user", "content": "x"}])
    except Exception:  # a template that cannot render a lone user turn has no default
        return None
    head = f"{start}system\n"
    cut = str(text).find(f"{start}user\n")
    prefix = str(text)[:cut] if cut > 0 else ""
    if prefix.startswith(head) and prefix.endswith(f"{end}\n"):
        return prefix[len(head) : -len(end) - 1]
    return None


class Renderer:
    """Renders conversations to prompt ids and parses output ids, for one tokenizer."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        cache_size: int = 256,
        use_model_template: bool | None = None,
        vision: Vision | None = None,
        family: ModelFamily | None = None,
    ) -> None:
        """``use_model_template``: render through the model's own chat template (default:
        when that template handles tools, or the model's family writes calls in another
        format than OpenForge's Hermes-style one) instead of OpenForge's ChatML tool
        template. ``vision``: the model reads images (user and tool-result images become
        its expanded placeholders; see :mod:`openforge.rendering.vision`). ``family``: the
        model family (default: detected from the model directory; see
        :mod:`openforge.rendering.families.catalog`)."""
        self.tokenizer = tokenizer
        self.family = family if family is not None else resolve_family(tokenizer)
        found = (tokenizer.token_id(t) for t in self.family.stop_tokens)
        family_stops = frozenset(i for i in found if i is not None)
        # Engine stop ids the family adds to the tokenizer's own (Harmony's <|call|>, say).
        self.stop_token_ids = sorted(family_stops - tokenizer.stop_ids)
        self._drop_ids = tokenizer.stop_ids | family_stops
        call_end = self.family.call_end
        self._call_end_id = tokenizer.token_id(call_end) if call_end else None
        self.vision = vision
        self._image_text = vision.marker if vision is not None else IMAGE_PLACEHOLDER
        self._shared = _LRU(cache_size)
        self._tools_text: OrderedDict[tuple[bytes, str, str | None], str] = OrderedDict()
        if use_model_template is None:
            own = self.family.tools.name == "hermes"
            use_model_template = tokenizer.template_handles_tools or not own
        ends = (tokenizer.eos_text, *self.family.stop_tokens)
        self._model_template = (
            TemplateRenderer(tokenizer, ends, self.family.rerenders) if use_model_template else None
        )
        # Ids that close a reply as the template closes its turn (a recorded reply cut
        # short gets end_id appended).
        self.turn_end_ids: frozenset[int] = frozenset()
        if self._model_template is not None:
            # Replies are spliced in bare: the template writes their header and separator.
            self.end_id = tokenizer.eos_id
            self.turn_end_ids = frozenset({self.end_id, *family_stops})
            self.generation_ids: list[int] = []
            self.turn_separator_ids: list[int] = []
            self.default_system: str | None = None
            return
        start = tokenizer.token_id("<|im_start|>")
        end = tokenizer.token_id("<|im_end|>")
        if start is None or end is None:
            raise TokenizerError(
                f"{tokenizer.path}: no <|im_start|>/<|im_end|> tokens; OpenForge's tool "
                "template is ChatML (use a model whose own chat template handles tools)"
            )
        self.start_id, self.end_id = start, end
        self.turn_end_ids = frozenset({end})
        self.turn_separator_ids = untracked(tokenizer.encode("\n"))
        self.generation_ids = untracked([start, *tokenizer.encode("assistant\n")])
        self.default_system = _default_system(tokenizer, "<|im_start|>", "<|im_end|>")

    # ---- public API -------------------------------------------------------------------

    @property
    def uses_model_template(self) -> bool:
        """True when prompts are rendered through the model's own chat template."""
        return self._model_template is not None

    def shared_json(self, key: Hashable, ids: Sequence[int]) -> bytes | None:
        """The JSON (no brackets) of a segment's ``ids`` when they are the ones this
        renderer shares between rollouts under ``key``; else None."""
        return self._shared.json(key, ids)

    def new_history(self) -> RolloutHistory:
        """A fresh per-rollout history (keep it for the rollout's lifetime)."""
        return RolloutHistory(self)

    def render(self, conv: Conversation, history: RolloutHistory | None = None) -> RenderedPrompt:
        """Prompt ids for ``conv``, reusing ``history``'s sampled replies and cached segments."""
        if self._model_template is not None:
            prefill = bool(conv.messages) and conv.messages[-1].role == "assistant"
            return self._model_template.render(conv, history, prefill=prefill)
        cache = history.segment_cache if history is not None else {}
        same, texts = _same_leading(conv, history)
        made: _Texts = {}
        out = RenderedPrompt(ids=[])
        segs = out.segments
        start = self._system(conv, segs, out)
        msgs = conv.messages
        i = start
        h = hash(segs[0].key) if segs else 0
        hashes = [h] if segs else []
        # Per segment, for the next render to resume from (LastRender)
        ends, images, parts = [start] * len(segs), [out.images] * len(segs), [0] * len(segs)
        last = history.last_render if history is not None else None
        k = 0
        if last is not None and history is not None:
            k = _resume_point(last, history, segs, same)
        reply_at: int | None = None  # the first reply's segment; before it, the task
        unsure: list[tuple[int, TurnKey, TurnKey]] = []
        if last is not None and k:
            # The leading segments of the last render, as they are: their messages are the
            # very objects, and no turn recorded since changes any of them.
            i, h = last.ends[k - 1], last.hashes[k - 1]
            reply_at = None if k <= last.task else last.task
            hashes, ends = last.hashes[:k], last.ends[:k]
            images, parts = last.images[:k], last.parts[:k]
            unsure = [u for u in last.unsure if u[0] < k]
            _restore(last, k, out)
            made.update((at, text) for at, text in texts.items() if at < i)
        while i < len(msgs):
            m = msgs[i]
            if m.role == "assistant":
                if i == len(msgs) - 1:
                    segs.append(self._prefill(m, i))
                    break
                seg, settled = self._assistant(m, i, h, history, cache, out)
                if not settled:
                    unsure.append((len(segs), fast_key(m), canonical_key(m)))
                if reply_at is None:
                    reply_at = len(segs)
                segs.append(seg)
                i += 1
            else:  # a user or system turn, or a run of tool results: one segment
                j = i + 1
                while m.role == "tool" and j < len(msgs) and msgs[j].role == "tool":
                    j += 1
                text, n = self._unit_text(msgs, i, j, same, texts, made)
                out.images += n if self.vision is None else 0
                segs.append(
                    self._text_segment(text, cache, i, m.role, reply_at is None, msgs[i:j], out)
                )
                i = j
            h = hash((h, segs[-1].key))
            hashes.append(h)
            ends.append(i)
            images.append(out.images)
            parts.append(len(out.image_parts))
        out.path_hash = h
        if not segs or segs[-1].kind != "prefill":
            segs.append(Segment(("generation",), self.generation_ids, -1, "generation", False))
        self._assemble(out, hashes, history)
        if history is not None and history.calls:  # a first prompt may be the only one
            history.text_messages, history.texts = list(msgs), made
            history.last_render = LastRender(
                segs[: len(hashes)], hashes, ends, images, parts, out.drift, out.image_parts,
                len(hashes) if reply_at is None else reply_at, len(history.calls), unsure,
            )  # fmt: skip
        return out

    def _unit_text(
        self, msgs: list[Message], i: int, j: int, same: int, before: _Texts, made: _Texts
    ) -> tuple[str, int]:
        """The text (and images) of the user, system or tool-results turn ``msgs[i:j]``:
        kept from the last render when its messages are the very same objects (``j <=
        same``). Then its hash is kept too, and the segment caches find it without hashing
        the text again: a prompt's unchanged turns cost a lookup each, not a copy and a
        hash of all their text."""
        kept = before.get(i) if j <= same else None
        if kept is not None and kept[0] == j:
            made[i] = kept
            return kept[1], kept[2]
        first = msgs[i]
        if first.role == "tool":
            body, n = tool_results_text(msgs[i:j], self._image_text)
            text = "user\n" + body
        else:
            body, n = content_text(first.content, self._image_text)
            text = f"{_ROLE[first.role]}\n{body}"
        made[i] = (j, text, n)
        return text, n

    def count_tokens(self, conv: Conversation) -> int:
        """How many tokens ``conv``'s prompt takes (for Anthropic ``count_tokens``)."""
        return len(self.render(conv).ids)

    def encode_reply(
        self,
        text: str,
        reasoning: str | None = None,
        tool_calls: list[ToolCall] | None = None,
        *,
        validate: bool = True,
    ) -> list[int]:
        """The ids the model emits for this reply under the template, ending with eos."""
        calls = tool_calls or []
        if validate:
            for c in calls:
                if not canonical_arguments(c.arguments).startswith("{"):
                    raise RenderError(f"tool call {c.name!r}: arguments must be a JSON object")
        end = self._call_end_id if calls and self._call_end_id is not None else self.end_id
        return [*self.encode_pieces(self.family.reply_pieces(text, reasoning, calls)), end]

    def encode_pieces(self, pieces: list[Piece]) -> list[int]:
        """A reply's pieces as ids: a marker that is one token of the vocabulary as that
        token, everything else (content, markers the vocabulary lacks) as text."""
        ids: list[int] = []
        text = ""
        for piece, marker in pieces:
            tid = self.tokenizer.token_id(piece) if marker else None
            if tid is None:
                text += piece
                continue
            if text:
                ids += self.tokenizer.encode(text)
                text = ""
            ids.append(tid)
        if text:
            ids += self.tokenizer.encode(text)
        return ids

    def parse(
        self,
        output_ids: list[int],
        id_factory: IdFactory | None = None,
        *,
        tools: Sequence[ToolSpec] = (),
        prompt_ids: Sequence[int] = (),
    ) -> ParsedOutput:
        """Text, reasoning and tool calls from an engine's output ids."""
        parser = self.stream_parser(id_factory, tools=tools, prompt_ids=prompt_ids)
        parser.feed(output_ids)
        return parser.finish()

    def stream_parser(
        self,
        id_factory: IdFactory | None = None,
        *,
        tools: Sequence[ToolSpec] = (),
        prompt_ids: Sequence[int] = (),
    ) -> OutputParser:
        """An incremental parser for one streamed output. ``tools``: the request's (some
        formats type argument values by their schema); ``prompt_ids``: the prompt, whose
        generation prompt may have opened the reasoning block already."""
        family = self.family
        if family.tools.parser is not None:
            return family.tools.parser(self.tokenizer, tools, id_factory, self._drop_ids)
        if family.tools.name == "hermes" and not self.uses_model_template:
            # OpenForge's own template: decoded exactly as it always was.
            return StreamParser(self.tokenizer, id_factory, in_reasoning=self._opened(prompt_ids))
        return StreamParser(
            self.tokenizer,
            id_factory,
            tool_format=family.tools,
            reasoning=family.reasoning,
            tools=tools,
            in_reasoning=self._opened(prompt_ids),
            drop_ids=self._drop_ids,
        )

    def _opened(self, prompt_ids: Sequence[int]) -> bool:
        """Whether the prompt ends inside an open reasoning block (``…<think>\n``)."""
        think = self.family.reasoning
        if think is None or not prompt_ids:
            return False
        tail = "".join(self.tokenizer.special_text(i) for i in prompt_ids[-4:])
        return tail.rstrip().endswith(think.open)

    # ---- segments ---------------------------------------------------------------------

    def _segment_ids(self, text: str) -> list[int]:
        tokens = self.tokenizer.encode(text)
        return untracked([self.start_id, *tokens, self.end_id, *self.turn_separator_ids])

    def _text_segment(
        self,
        text: str,
        cache: dict[Hashable, Sequence[int]],
        index: int,
        kind: str,
        shared: bool,
        messages: Sequence[Message] = (),
        out: RenderedPrompt | None = None,
    ) -> Segment:
        images = (
            [p for m in messages for p in m.content if isinstance(p, ImagePart)]
            if self.vision is not None
            else []
        )
        if images:
            assert out is not None
            out.image_parts += images
            return self._image_segment(text, images, cache, index, kind)
        # Segments before the first reply (the task) are alike across a group's rollouts.
        ids = cache.get(text)
        if ids is None and shared:
            ids = self._shared.get(text)
            if ids is not None:
                cache[text] = ids
        if ids is not None:
            return Segment(text, ids, index, kind, False)
        ids = self._segment_ids(text)
        cache[text] = ids
        if shared:
            self._shared.put(text, ids)
        return Segment(text, ids, index, kind, True)

    def _image_segment(
        self,
        text: str,
        images: list[ImagePart],
        cache: dict[Hashable, Sequence[int]],
        index: int,
        kind: str,
    ) -> Segment:
        """A turn with images: keyed by its text and the images' digests (the text alone
        is the same for any screenshot), placeholders expanded to the images' grids."""
        key = ("images", text, tuple(p.sha256 for p in images))
        ids = cache.get(key)
        if ids is not None:
            return Segment(key, ids, index, kind, False)
        assert self.vision is not None
        ids = untracked([self.start_id, *self.vision.encode(text, images, self.tokenizer.encode)])
        ids += [self.end_id, *self.turn_separator_ids]
        cache[key] = ids
        return Segment(key, ids, index, kind, True)

    def _tools(self, conv: Conversation) -> str:
        # The same bytes object for the same tools tuple: its hash is computed once.
        key = (tools_json(conv.tools), conv.tool_choice.mode, conv.tool_choice.name)
        text = self._tools_text.get(key)
        if text is None:
            text = tools_section(conv.tools, conv.tool_choice)
            with self._shared.lock:
                self._tools_text[key] = text
                if len(self._tools_text) > self._shared.size:
                    self._tools_text.popitem(last=False)
        return text

    def _system(self, conv: Conversation, segs: list[Segment], out: RenderedPrompt) -> int:
        """Append the system segment (system prompt + tools); return the next message index."""
        msgs = conv.messages
        start, text = 0, None
        if msgs and msgs[0].role in ("system", "developer"):
            text, out.images = content_text(msgs[0].content)
            start = 1
        if conv.tools:
            base = text if text is not None else self.default_system
            text = (f"{base}\n\n" if base else "") + self._tools(conv)
        elif text is None:
            text = self.default_system
        if text is None:
            return start
        key = "system\n" + text
        ids = self._shared.get(key)
        fresh = ids is None
        if ids is None:
            ids = self._segment_ids(key)
            self._shared.put(key, ids)
        segs.append(Segment(key, ids, 0, "system", fresh))
        return start

    def _assistant(
        self,
        m: Message,
        index: int,
        path_hash: int,
        history: RolloutHistory | None,
        cache: dict[Hashable, Sequence[int]],
        out: RenderedPrompt,
    ) -> tuple[Segment, bool]:
        """The segment of a re-sent assistant message, and whether it is settled (see
        RolloutHistory.lookup_turn): the recorded turn's own ids when one matches."""
        turn, settled = history.lookup_turn(m, path_hash) if history is not None else (None, False)
        if turn is not None:
            drift_at = turn.drift_at(self)
            if drift_at is not None:
                at = sum(len(s.ids) for s in out.segments) + len(self.generation_ids)
                out.drift.append(DriftPoint(index, at + drift_at))
            return Segment(("turn", turn.index), turn.segment_ids, index, "reply", False), settled
        body = reply_body(content_text(m.content)[0], m.reasoning, m.tool_calls)
        key = ("assistant", body)
        ids = cache.get(key)
        if ids is not None:
            return Segment(key, ids, index, "assistant", False), False
        tokens = self.tokenizer.encode(body)
        ids = untracked([*self.generation_ids, *tokens, self.end_id, *self.turn_separator_ids])
        cache[key] = ids
        return Segment(key, ids, index, "assistant", True), False

    def _prefill(self, m: Message, index: int) -> Segment:
        """A trailing assistant message is a prefill: the reply continues it, turn left open."""
        body = reply_body(content_text(m.content)[0], m.reasoning, m.tool_calls)
        ids = untracked([*self.generation_ids, *self.tokenizer.encode(body)])
        return Segment(("prefill", body), ids, index, "prefill", True)

    def _assemble(
        self, out: RenderedPrompt, hashes: list[int], history: RolloutHistory | None
    ) -> None:
        ids: list[int] = untracked([])  # see rendering/untracked.py
        fresh = 0
        for s in out.segments:
            ids += s.ids
            if s.fresh:
                fresh += len(s.ids)
        out.ids = ids
        out.reused_tokens = len(ids) - fresh
        if history is None:
            return
        out.ids_json = history.ids_json(out.segments)
        if not history.calls:
            return
        out.parent = history.parent_of(hashes)
        if out.parent is None:
            out.fork = True
            out.fork_reason = history.fork_reason(out.segments)


def _resume_point(last: LastRender, history: RolloutHistory, segs: list[Segment], same: int) -> int:
    """How many leading segments of ``last`` a render may take as they are: those whose
    messages all lie within the ``same`` leading message objects, up to the first reply a
    turn recorded since could change, after the same system segment (``segs`` holds this
    render's), and at least one past it; else 0."""
    old = last.segments
    if len(segs) > len(old) or any(
        a.ids is not b.ids or a.key != b.key for a, b in zip(segs, old, strict=False)
    ):
        return 0
    k = history.changed_since(last)
    while k > len(segs) and last.ends[k - 1] > same:
        k -= 1
    return k if k > len(segs) else 0


def _same_leading(conv: Conversation, history: RolloutHistory | None) -> tuple[int, _Texts]:
    """How many leading messages of ``conv`` are the last render's very objects, and that
    render's turn texts (a rollout's parser hands back every message a body resends)."""
    if history is None:
        return 0, {}
    before, msgs = history.text_messages, conv.messages
    # A system message made anew from a body's own field each call (Anthropic's `system`)
    # counts as the same when it is equal.
    if before and msgs and before[0] is not msgs[0] and _equal_system(before[0], msgs[0]):
        before = [msgs[0], *before[1:]]
    same = 0
    while same < len(before) and same < len(msgs) and before[same] is msgs[same]:
        same += 1
    return same, history.texts


def _restore(last: LastRender, k: int, out: RenderedPrompt) -> None:
    """Put the last render's first ``k`` segments, as they are, into ``out``: their messages
    are the very objects, and no turn recorded since changes any of them."""
    for seg in last.segments[len(out.segments) : k]:
        if seg.fresh:  # tokenized last call, cached since: not fresh this time
            seg = Segment(seg.key, seg.ids, seg.message_index, seg.kind, False)
        out.segments.append(seg)
    out.images = last.images[k - 1]
    out.image_parts = last.image_parts[: last.parts[k - 1]]
    out.drift = [d for d in last.drift if d.message_index < last.ends[k - 1]]


def _equal_system(a: Message, b: Message) -> bool:
    return a.role in ("system", "developer") and a == b
