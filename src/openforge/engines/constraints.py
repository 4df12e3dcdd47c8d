"""Constrained decoding for structured outputs (``response_format``), with llguidance.

A :class:`Grammars` belongs to one engine and its tokenizer; :meth:`Grammars.matcher`
compiles a request's :class:`~openforge.conversation.ResponseFormat` into a
:class:`Constraint` that, before each sampling step, says which tokens may come next
(:meth:`Constraint.mask`) and then follows the token that was sampled
(:meth:`Constraint.advance`). The engine sets disallowed logits to ``-inf`` *before*
temperature, top-k and top-p, so the logprob it records for a token is that of the
constrained distribution the token was actually drawn from.

JSON is generated compact (no free whitespace): a small model given free whitespace can
spend its whole budget on newlines, and every API client parses compact JSON alike.
Once the grammar is complete only the end-of-sequence ids are allowed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from openforge.conversation import ResponseFormat
from openforge.engines.base import EngineRequestError

if TYPE_CHECKING:  # declared only in llguidance's type stub
    from llguidance._lib import JsonCompileOptions

__all__ = ["Constraint", "Grammars"]

_JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False}
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class Constraint:
    """One sequence's grammar state."""

    __slots__ = ("_matcher", "_vocab")

    def __init__(self, matcher: Any, vocab: int) -> None:
        self._matcher = matcher
        self._vocab = vocab

    def mask(self) -> torch.Tensor:
        """``[V]`` booleans: True for the tokens the grammar allows next."""
        packed = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        bits = np.unpackbits(packed, bitorder="little")[: self._vocab]
        return torch.from_numpy(bits.astype(np.bool_))

    def advance(self, token: int) -> None:
        """Follow the sampled ``token`` (it was allowed: the mask was applied)."""
        self._matcher.consume_token(token)

    @property
    def failed(self) -> str | None:
        """The matcher's error, if it entered one (a bug: masked sampling cannot)."""
        return str(self._matcher.get_error()) if self._matcher.is_error() else None


class Grammars:
    """Compiles response formats for one tokenizer (built once, on first use: ~0.7 s)."""

    def __init__(self, hf_tokenizer: Any, vocab: int, eos_ids: frozenset[int]) -> None:
        self._hf = hf_tokenizer
        self.vocab = vocab
        self._eos = sorted(eos_ids)
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def _ll_tokenizer(self) -> Any:
        import llguidance.hf

        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = llguidance.hf.from_tokenizer(
                    self._hf, n_vocab=self.vocab, eos_token=self._eos
                )
            return self._tokenizer

    def matcher(self, fmt: ResponseFormat) -> Constraint:
        """A fresh constraint for ``fmt``; :class:`EngineRequestError` when the schema
        cannot be compiled (an unsupported or malformed JSON schema)."""
        from llguidance import LLMatcher

        schema = fmt.schema if fmt.type == "json_schema" and fmt.schema else _ANY_OBJECT
        tokenizer = self._ll_tokenizer()
        try:
            grammar = LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)
        except ValueError as exc:
            raise EngineRequestError(f"the JSON schema cannot be used: {exc}") from None
        matcher = LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise EngineRequestError(f"the JSON schema cannot be used: {matcher.get_error()}")
        return Constraint(matcher, self.vocab)
