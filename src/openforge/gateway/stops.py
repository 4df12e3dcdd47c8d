"""Keeping stop sequences out of the text a client sees.

OpenAI (``stop``) and Anthropic (``stop_sequences``) return the text *before* a matched
stop sequence and never the sequence itself. The engine samples tokens: it ends a
sequence once the detokenized output contains a stop string and keeps the tokens that
completed it, because they were sampled and training needs exactly those. So the gateway
cuts the visible text at the stop string (the recorded output ids are untouched), and
while streaming it holds back any tail of the text that could still grow into a stop
string, so nothing from the cut onwards is ever sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from openforge.conversation import CompletionDelta, TextDelta

__all__ = ["StopGuard", "cut_at_stop"]


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """``text`` up to the stop string that completes first, and that string (None when none
    occurs). First to *complete*, as generation ends there: in ``"OPO"`` with stops ``P`` and
    ``OPO``, ``P`` ends the output at ``"OP"`` before ``OPO`` could; of stops completing at
    the same place, the one starting earlier."""
    best: tuple[int, int, str] | None = None  # (end, start, stop)
    for stop in stops:
        i = text.find(stop) if stop else -1
        if i == -1:
            continue
        found = (i + len(stop), i, stop)
        if best is None or found[:2] < best[:2]:
            best = found
    return (text, None) if best is None else (text[: best[1]], best[2])


def _open_tail(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a stop string."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest


class StopGuard:
    """Filters one call's streamed deltas so no stop string (or what follows it) is sent."""

    __slots__ = ("_held", "stopped", "stops")

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""  # text that may be the start of a stop string
        self.stopped = False

    def filter(self, deltas: list[CompletionDelta]) -> list[CompletionDelta]:
        """The deltas a client may see now; text that might begin a stop string waits."""
        out: list[CompletionDelta] = []
        for d in deltas:
            if self.stopped:  # the engine ends on the token that completed the stop
                continue
            if not isinstance(d, TextDelta):
                out += self._release()
                out.append(d)
                continue
            text = self._held + d.text
            kept, hit = cut_at_stop(text, self.stops)
            if hit is not None:
                self._held, self.stopped = "", True
                if kept:
                    out.append(TextDelta(kept))
                continue
            hold = _open_tail(text, self.stops)
            if len(text) > hold:
                out.append(TextDelta(text[: len(text) - hold]))
            self._held = text[len(text) - hold :]
        return out

    def flush(self) -> list[CompletionDelta]:
        """What is still held back once the output has ended without a stop string."""
        return [] if self.stopped else self._release()

    def _release(self) -> list[CompletionDelta]:
        held, self._held = self._held, ""
        return [TextDelta(held)] if held else []
