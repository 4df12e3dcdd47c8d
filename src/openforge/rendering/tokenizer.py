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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tokenizers import Tokenizer as RustTokenizer

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

    __slots__ = ("_ids", "_prefix", "_read", "_tok")

    def __init__(self, tok: RustTokenizer) -> None:
        self._tok = tok
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def feed(self, ids: list[int]) -> str:
        self._ids.extend(ids)
        before = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=True)
        after = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return str(after[len(before) :])
        return ""

    def flush(self) -> str:
        before = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=True)
        after = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=True)
        self._prefix = self._read = len(self._ids)
        return str(after[len(before) :])


@dataclass(eq=False)
class Tokenizer:
    """A loaded fast tokenizer plus what rendering needs to know about the model."""

    path: str
    hf: Any  # the transformers tokenizer (kept for apply_chat_template)
    eos_id: int
    eos_text: str
    stop_ids: frozenset[int]
    special_ids: frozenset[int]
    chat_template: str | None
    _content: RustTokenizer
    _template: RustTokenizer
    _bytes: list[bytes] | None

    def encode(self, text: str) -> list[int]:
        """Encode message content: special-token text is treated as plain text."""
        return list(self._content.encode(text, add_special_tokens=False).ids)

    def encode_template(self, text: str) -> list[int]:
        """Encode template output, where special-token text means the special token."""
        return list(self._template.encode(text, add_special_tokens=False).ids)

    def token_id(self, text: str) -> int | None:
        """The id of a single (usually special) token, or None."""
        found = self._template.token_to_id(text)
        return None if found is None else int(found)

    def decode(self, ids: list[int]) -> str:
        """Decode ids to text, dropping special tokens."""
        det = self.detokenizer()
        return det.feed(ids) + det.flush()

    def detokenizer(self) -> Detokenizer:
        """A fresh incremental detokenizer."""
        if self._bytes is not None:
            return _ByteDetokenizer(self._bytes)
        return _WindowDetokenizer(self._template)

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


@functools.lru_cache(maxsize=16)
def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    """Load the fast tokenizer of a HF model directory (cached per path)."""
    from transformers import AutoTokenizer

    path = Path(model_dir)
    if not (path / "tokenizer.json").is_file():
        raise TokenizerError(f"{path}: no tokenizer.json (a fast tokenizer is required)")
    hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    backend = getattr(hf, "backend_tokenizer", None)
    if not isinstance(backend, RustTokenizer):
        raise TokenizerError(f"{path}: tokenizer has no fast (Rust) backend")
    if hf.eos_token_id is None:
        raise TokenizerError(f"{path}: tokenizer_config.json names no eos_token")
    eos_id = int(hf.eos_token_id)
    special = frozenset(int(i) for i, t in backend.get_added_tokens_decoder().items() if t.special)
    content = copy.deepcopy(backend)
    content.encode_special_tokens = True
    template = getattr(hf, "chat_template", None)
    return Tokenizer(
        path=str(path),
        hf=hf,
        eos_id=eos_id,
        eos_text=str(hf.eos_token),
        stop_ids=_stop_ids(path, eos_id),
        special_ids=special,
        chat_template=template if isinstance(template, str) else None,
        _content=content,
        _template=backend,
        _bytes=_byte_table(backend, special),
    )
