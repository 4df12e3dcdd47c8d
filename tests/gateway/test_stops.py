"""Stop strings never reach the client, however the text is split into deltas."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from openforge.conversation import CompletionDelta, TextDelta, ToolCallStart
from openforge.gateway.stops import StopGuard, cut_at_stop


def _stream(pieces: list[str], stops: list[str]) -> str:
    guard = StopGuard(stops)
    out: list[CompletionDelta] = []
    for p in pieces:
        out += guard.filter([TextDelta(p)])
    out += guard.flush()
    return "".join(d.text for d in out if isinstance(d, TextDelta))


def test_cut_at_the_earliest_stop() -> None:
    assert cut_at_stop("a END b STOP", ["STOP", "END"]) == ("a ", "END")
    assert cut_at_stop("no stop here", ["STOP"]) == ("no stop here", None)
    assert cut_at_stop("x", ["", "y"]) == ("x", None)
    # The stop that completes first wins, as generation ends there (found by hypothesis).
    assert cut_at_stop("OPO", ["P", "OPO"]) == ("O", "P")
    assert cut_at_stop("xAB", ["AB", "B"]) == ("x", "AB")


def test_a_stop_split_across_deltas_is_never_sent() -> None:
    guard = StopGuard(["</answer>"])
    assert guard.filter([TextDelta("42 </ans")]) == [TextDelta("42 ")]
    assert guard.filter([TextDelta("wer> trailing")]) == []
    assert guard.stopped and guard.flush() == []


def test_held_text_is_released_when_it_cannot_become_a_stop() -> None:
    guard = StopGuard(["STOP"])
    assert guard.filter([TextDelta("go ST")]) == [TextDelta("go ")]
    assert guard.filter([TextDelta("AY")]) == [TextDelta("STAY")]
    assert guard.filter([TextDelta("ST")]) == []
    assert guard.flush() == [TextDelta("ST")]


def test_other_deltas_release_held_text_first() -> None:
    guard = StopGuard(["STOP"])
    call = ToolCallStart(0, "call_1", "bash")
    assert guard.filter([TextDelta("a S"), call]) == [TextDelta("a "), TextDelta("S"), call]


@given(
    text=st.text(alphabet="abST OP", max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
    stops=st.lists(st.text(alphabet="abSTOP", min_size=1, max_size=4), min_size=1, max_size=3),
)
def test_streamed_text_equals_the_cut_text(text: str, cuts: list[int], stops: list[str]) -> None:
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert _stream(pieces, stops) == cut_at_stop(text, stops)[0]
