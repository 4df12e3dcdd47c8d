"""A model's tokenizer as rendering needs it: two encoders, stop ids, chat-template facts.

Prompt structure tokens (``<|im_start|>``, ``<|im_end|>``) are placed as ids by the
renderer; message content is encoded with special-token matching *off*, so a user who
types ``<|im_end|>`` gets those characters, not a forged turn boundary.
"""

from __future__ import annotations

import codecs
import copy
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tokenizers import Tokenizer as RustTokenizer

from openforge.rendering.bpe import fast_encoder

__all__ = ["Detokenizer", "Tokenizer", "TokenizerError", "load_tokenizer"]


class TokenizerError(ValueError):
    """The model directory has no usable fast tokenizer."""


class Detokenizer(Protocol):
    """Turns ids into text incrementally; ``feed`` never splits a UTF-8 character."""

    def feed(self, ids: list[int]) -> str: ...

    def flush(self) -> str: ...


@functools.cache
def _byte_decoder() -> dict[str, int]:
    # GPT-2's printable stand-ins for the 256 byte values (the ByteLevel pre-tokenizer's alphabet).
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars = list(keep)
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


class _ByteDetokenizer:
    """Exact, O(1)-per-token detokenizing for byte-level BPE vocabularies."""

    __slots__ = ("_decoder", "_table")

    def __init__(self, table: list[bytes]) -> None:
        self._table = table
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: list[int]) -> str:
        table = self._table
        data = b"".join(table[i] if 0 <= i < len(table) else b"" for i in ids)
        return str(self._decoder.decode(data))

    def flush(self) -> str:
        return str(self._decoder.decode(b"", final=True))


class _WindowDetokenizer:
    """Generic fallback: decode a sliding window, emit only text that cannot change."""

    __slots__ = ("_ids", "_prefix", "_read", "_skip", "_tok")

    def __init__(self, tok: RustTokenizer, skip_special: bool = True) -> None:
        self._tok = tok
        self._skip = skip_special
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def feed(self, ids: list[int]) -> str:
        self._ids.extend(ids)
        skip = self._skip
        before = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=skip)
        after = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=skip)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return str(after[len(before) :])
        return ""

    def flush(self) -> str:
        skip = self._skip
        before = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=skip)
        after = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=skip)
        self._prefix = self._read = len(self._ids)
        return str(after[len(before) :])


# Texts at least this long are encoded through ``encode_batch``, which gives up the GIL while
# it runs (plain ``encode`` holds it: a 10 MB tool log held every other thread for seconds).
# Same pipeline, same ids; for short texts the batch call's overhead is not worth it.
_RELEASE_GIL_CHARS = 65_536


def _encode(tok: RustTokenizer, text: str) -> list[int]:
    if len(text) >= _RELEASE_GIL_CHARS:
        return list(tok.encode_batch([text], add_special_tokens=False)[0].ids)
    return list(tok.encode(text, add_special_tokens=False).ids)


# Where a long text may be cut for tiktoken's BPE (rendering/bpe.py: GPT-2's split) without
# changing its ids: a lone newline between two printable ASCII characters. The split makes
# that newline a piece of its own whether the text goes on or ends after it (``\s+(?!\S)``
# and ``\s+`` both take exactly it), no piece reaches across it (only whitespace pieces
# hold a newline), and nothing looks behind, so the pieces after the cut are the same.
_CUT = re.compile(r"(?<=[!-~]\n)(?=[!-~])")
_PIECE_CHARS = 1 << 20


def _encode_pieces(fast: Callable[[str], list[int]], text: str) -> list[int]:
    """``fast(text)``, encoded ~1 MB at a time: tiktoken holds the GIL for the whole of one
    call (a 60 MB tool log: over a second, while the admin listener's health probe and
    every other thread waited); between pieces the interpreter hands it over."""
    ids: list[int] = []
    start = 0
    while start < len(text):
        cut = _CUT.search(text, start + _PIECE_CHARS) if len(text) - start > _PIECE_CHARS else None
        end = cut.start() if cut is not None else len(text)
        ids += fast(text[start:end])
        start = end
    return ids


@dataclass(eq=False)
class Tokenizer:
    """A loaded fast tokenizer plus what rendering needs to know about the model."""

    path: str
    eos_id: int
    eos_text: str
    stop_ids: frozenset[int]
    special_ids: frozenset[int]
    chat_template: str | None
    _content: RustTokenizer
    _template: RustTokenizer
    _bytes: list[bytes] | None
    # tiktoken's BPE where it gives the same ids as _content (rendering/bpe.py), and the
    # test of the texts it may be given.
    _fast: Callable[[str], list[int]] | None = field(default=None, repr=False)
    _safe: Callable[[str], bool] | None = field(default=None, repr=False)

    @functools.cached_property
    def hf(self) -> Any:
        """The transformers tokenizer, for ``apply_chat_template`` with a model's own template.

        Loaded on first use only: importing transformers pulls in torch (seconds), and the
        OpenForge template path never needs it.
        """
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.path, local_files_only=True)

    def encode(self, text: str) -> list[int]:
        """Encode message content: special-token text is treated as plain text."""
        fast, safe = self._fast, self._safe
        if fast is not None and safe is not None and safe(text):
            if len(text) < _RELEASE_GIL_CHARS:
                return fast(text)
            return _encode_pieces(fast, text)
        return _encode(self._content, text)

    def encode_template(self, text: str) -> list[int]:
        """Encode template output, where special-token text means the special token."""
        return _encode(self._template, text)

    def token_id(self, text: str) -> int | None:
        """The id of a single (usually special) token, or None."""
        found = self._template.token_to_id(text)
        return None if found is None else int(found)

    def decode(self, ids: list[int]) -> str:
        """Decode ids to text, dropping special tokens."""
        det = self.detokenizer()
        return det.feed(ids) + det.flush()

    def token_text(self, token_id: int) -> str:
        """One token's own text (for logprobs); special tokens and unknown ids give "".

        From the byte table when the tokenizer has one (a list lookup: answers with
        logprobs ask once per output token), else by decoding the id alone.
        """
        table = self._bytes
        if table is not None:
            return table[token_id].decode("utf-8", "replace") if 0 <= token_id < len(table) else ""
        return self.decode([token_id])

    def detokenizer(self, special: bool = False) -> Detokenizer:
        """A fresh incremental detokenizer; ``special``: special tokens come out as their
        text (families whose tool-call markers are special tokens need to see them)."""
        if self._bytes is not None:
            return _ByteDetokenizer(self._special_bytes if special else self._bytes)
        return _WindowDetokenizer(self._template, skip_special=not special)

    @functools.cached_property
    def _special_bytes(self) -> list[bytes]:
        """The byte table with each special token's own text in place of nothing."""
        assert self._bytes is not None
        table = list(self._bytes)
        for i, token in self._template.get_added_tokens_decoder().items():
            if 0 <= i < len(table) and i in self.special_ids:
                table[i] = token.content.encode()
        return table

    def special_text(self, token_id: int) -> str:
        """The text of any token, special ones included (for reading prompts' markers)."""
        return str(self._template.decode([token_id], skip_special_tokens=False))

    @functools.cached_property
    def added_tokens(self) -> frozenset[str]:
        """The texts of the vocabulary's added tokens (special or not)."""
        return frozenset(t.content for t in self._template.get_added_tokens_decoder().values())

    @property
    def template_handles_tools(self) -> bool:
        """True when the model's own chat template renders a ``tools`` list."""
        tpl = self.chat_template or ""
        return "tools" in tpl and ("tool_call" in tpl or "tool_calls" in tpl)


def _byte_table(tok: RustTokenizer, special: frozenset[int]) -> list[bytes] | None:
    dec = json.loads(tok.to_str()).get("decoder") or {}
    if dec.get("type") != "ByteLevel":
        return None
    inverse = _byte_decoder()
    added = {int(i): t for i, t in tok.get_added_tokens_decoder().items()}
    table: list[bytes] = []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        if i in special:
            table.append(b"")
        elif i in added:
            table.append(added[i].content.encode())
        else:
            piece = tok.id_to_token(i) or ""
            try:
                table.append(bytes(inverse[c] for c in piece))
            except KeyError:
                return None
    return table


def _stop_ids(path: Path, eos_id: int) -> frozenset[int]:
    ids = {eos_id}
    gen = path / "generation_config.json"
    if gen.is_file():
        value = json.loads(gen.read_text()).get("eos_token_id")
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))
    return frozenset(ids)


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens as strings or as AddedToken dicts.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(path: Path, config: dict[str, Any]) -> str | None:
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: take the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


@functools.lru_cache(maxsize=16)
def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    """Load the fast tokenizer of a HF model directory (cached per path).

    Reads ``tokenizer.json`` with the Rust ``tokenizers`` library directly, so a gateway
    that serves a scripted or remote engine never imports transformers or torch.
    """
    path = Path(model_dir)
    if not (path / "tokenizer.json").is_file():
        raise TokenizerError(f"{path}: no tokenizer.json (a fast tokenizer is required)")
    backend = RustTokenizer.from_file(str(path / "tokenizer.json"))
    config_file = path / "tokenizer_config.json"
    config: dict[str, Any] = json.loads(config_file.read_text()) if config_file.is_file() else {}
    eos_text = _token_text(config.get("eos_token"))
    eos = backend.token_to_id(eos_text) if eos_text else None
    if eos_text is None or eos is None:
        raise TokenizerError(f"{path}: tokenizer_config.json names no eos_token in the vocabulary")
    eos_id = int(eos)
    special = frozenset(int(i) for i, t in backend.get_added_tokens_decoder().items() if t.special)
    content = copy.deepcopy(backend)
    content.encode_special_tokens = True
    fast = fast_encoder(json.loads(backend.to_str()), _byte_decoder())
    return Tokenizer(
        path=str(path),
        eos_id=eos_id,
        eos_text=eos_text,
        stop_ids=_stop_ids(path, eos_id),
        special_ids=special,
        chat_template=_chat_template(path, config),
        _content=content,
        _template=backend,
        _bytes=_byte_table(backend, special),
        _fast=fast[0] if fast else None,
        _safe=fast[1] if fast else None,
    )
