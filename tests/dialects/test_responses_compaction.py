"""Responses compaction items parsed: a trigger becomes the instruction turn, a compaction
item the summary turn (read back from this gateway's own content), both kept the same
when a resent body is parsed through the rollout's memo."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from openforge.conversation import Summary
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_responses import parse_request
from openforge.dialects.openai_responses.compaction import (
    INSTRUCTION,
    decode_content,
    encode_content,
)
from openforge.dialects.openai_responses.parse import parse_compact_request
from openforge.dialects.prefix import BodyMemo

ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": encode_content("S.", "resp_a")}


def _body(items: list[Any], **more: Any) -> bytes:
    return orjson.dumps({"model": "m", "instructions": "Be brief.", "input": items, **more})


def test_content_round_trip_and_foreign_content() -> None:
    assert decode_content(encode_content("a ✓ summary", "resp_x"), "input[0]") == (
        "a ✓ summary",
        "resp_x",
    )
    for junk in ("gAAAAABopaque", "ofc1.!!", "ofc1." + "e30="):
        with pytest.raises(ApiError) as err:
            decode_content(junk, "input[3]")
        assert err.value.param == "input[3].encrypted_content"


def test_summary_and_trigger_turns() -> None:
    items: list[Any] = [{"role": "user", "content": "Task."}, ITEM, {"type": "compaction_trigger"}]
    conv = parse_request(_body(items))
    assert [m.role for m in conv.messages] == ["system", "user", "user", "user"]
    assert conv.messages[2].text.endswith("summary:\n\nS.")
    assert conv.messages[3].text == INSTRUCTION
    assert conv.summaries == [Summary(2, "resp_a")] and conv.compact == "compaction_trigger"
    plain = parse_request(_body(items[:2]))
    assert plain.compact is None and plain.summaries == [Summary(2, "resp_a")]
    compact = parse_compact_request(_body(items[:2], stream=True))
    assert compact.compact == "responses/compact" and not compact.stream
    assert compact.messages[-1].text == INSTRUCTION


def test_memo_keeps_what_items_were() -> None:
    """A grown body parsed through the memo says what a whole parse says."""
    items: list[Any] = [
        {"role": "user", "content": "Task."},
        ITEM,
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    memo = BodyMemo()
    parse_request(_body(items), memo)
    grown = [*items, {"role": "user", "content": "More."}, {"type": "compaction_trigger"}]
    fast, whole = parse_request(_body(grown), memo), parse_request(_body(grown))
    assert fast.messages == whole.messages
    assert fast.summaries == whole.summaries == [Summary(2, "resp_a")]
    assert fast.compact == whole.compact == "compaction_trigger"
    # The trigger resent as a non-final item is refused, whole or through the memo.
    again = [*grown, {"role": "user", "content": "Go on."}]
    for memo_or_none in (memo, None):
        with pytest.raises(ApiError) as err:
            parse_request(_body(again), memo_or_none)
        assert err.value.param == "input[5]"
