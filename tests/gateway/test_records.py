"""A call's conversation JSON, made a message at a time, is what serialising it whole makes."""

from __future__ import annotations

import base64
import io

import orjson
from PIL import Image

from openforge.dialects.openai_chat.parse import parse_request
from openforge.dialects.prefix import BodyMemo
from openforge.gateway.images import stored_conversation
from openforge.gateway.records import ConversationJson, conversation_from_json


def _png(shade: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (shade, 0, 0)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def _body(messages: list[dict[str, object]]) -> bytes:
    return orjson.dumps({"model": "m", "messages": messages, "temperature": 0.5})


def test_conversation_json_equals_the_whole_serialisation_through_a_rollout() -> None:
    memo, made = BodyMemo(), ConversationJson()
    msgs: list[dict[str, object]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi é 🤖"},
    ]
    earlier = None
    for turn in range(6):
        if turn == 3:  # an edit: that message is parsed, and serialised, anew
            msgs[1] = {"role": "user", "content": "hello"}
        if turn == 4:  # a screenshot: stored by digest, its message new every call
            url = f"data:image/png;base64,{_png(turn)}"
            image = {"type": "image_url", "image_url": {"url": url}}
            msgs.append({"role": "user", "content": [{"type": "text", "text": "see"}, image]})
        conv = stored_conversation(parse_request(_body(msgs), memo))
        data = orjson.dumps(made.of(conv))
        assert data == orjson.dumps(conv)
        assert conversation_from_json(orjson.loads(data)) == conv
        if turn >= 2:  # kept from the rollout's last body (from its third), and its JSON
            assert conv.messages[0] is earlier
        earlier = conv.messages[0]
        msgs += [
            {"role": "assistant", "content": f"answer {turn}"},
            {"role": "user", "content": f"next {turn}"},
        ]
