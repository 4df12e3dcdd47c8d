"""Screenshots through the gateway with the official SDKs: checked, stored once, referenced."""

from __future__ import annotations

import base64
import hashlib
import io
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import orjson
import pytest
from PIL import Image

import openforge.dialects.images as images_module
from openforge.gateway.limits import Limits
from openforge.gateway.server import Gateway
from openforge.store.sqlite import SqliteStore

from .conftest import anthropic_client, new_rollout, openai_client


def screenshot(seed: int, size: tuple[int, int] = (128, 72), fmt: str = "PNG") -> bytes:
    """A small, distinct image per ``seed`` (noise, so PNG cannot shrink it to nothing)."""
    img = Image.frombytes(
        "RGB", size, hashlib.shake_256(str(seed).encode()).digest(3 * size[0] * size[1])
    )
    out = io.BytesIO()
    img.save(out, fmt)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _chat_image(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{b64(data)}"}}


async def test_screenshots_stored_once_and_referenced(gateway: Gateway) -> None:
    """Each call re-sends every screenshot so far: 4 calls, 10 images sent, 4 stored."""
    r = await new_rollout(gateway)
    client = openai_client(r)
    shots = [screenshot(i) for i in range(4)]
    content: list[Any] = [{"type": "text", "text": "Open the settings page."}]
    for shot in shots:
        content.append(_chat_image(shot))
        out = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": list(content)}]
        )
        assert out.choices[0].finish_reason in ("tool_calls", "stop")
    store = gateway.store
    assert isinstance(store, SqliteStore)
    calls = await store.calls(r["rollout_id"])
    assert [c.status for c in calls] == ["ok"] * 4
    digests = [hashlib.sha256(s).hexdigest() for s in shots]
    for n, call in enumerate(calls, start=1):
        parts = [p for p in call.conversation["messages"][0]["content"] if p["type"] == "image"]
        assert [p["sha256"] for p in parts] == digests[:n]
        assert all(p["url"] == f"sha256:{p['sha256']}" and p["width"] == 128 for p in parts)
        assert call.raw_request is not None
        assert b64(shots[0]).encode() not in call.raw_request  # referenced, not repeated
        assert f"sha256:{digests[0]}".encode() in call.raw_request
        assert [i["sha256"] for i in call.render_info["images"]] == digests[:n]
    assert await store.blob_bytes() == sum(len(s) for s in shots)
    for shot, digest in zip(shots, digests, strict=True):
        blob = await store.get_blob(digest)
        assert blob is not None and blob.data == shot and blob.media_type == "image/png"


async def test_responses_and_anthropic_images(gateway: Gateway) -> None:
    r = await new_rollout(gateway)
    shot = screenshot(7, fmt="JPEG")
    resp = await openai_client(r).responses.create(
        model="m",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what now?"},
                    {
                        "type": "input_image",
                        "image_url": f"data:image/jpeg;base64,{b64(shot)}",
                        "detail": "high",
                    },
                ],
            }
        ],
    )
    assert resp.status == "completed"
    msg = await anthropic_client(r).messages.create(
        model="m",
        max_tokens=32,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(shot)},
                    },
                    {"type": "text", "text": "and now?"},
                ],
            }
        ],
    )
    assert msg.stop_reason in ("tool_use", "end_turn")
    calls = await gateway.store.calls(r["rollout_id"])
    digest = hashlib.sha256(shot).hexdigest()
    image = calls[0].conversation["messages"][0]["content"][1]
    assert image["sha256"] == digest and image["detail"] == "high"
    assert calls[1].conversation["messages"][0]["content"][0]["sha256"] == digest
    assert await gateway.store.blob_bytes() == len(shot)  # two dialects, one blob


@pytest.mark.parametrize(
    ("data", "media_type", "why"),
    [
        ("not base64!!", "image/png", "not valid base64"),
        (b64(b"just some text, not an image"), "image/png", "not an image"),
        (b64(screenshot(1)), "image/jpeg", "the bytes are 'image/png'"),
        (b64(screenshot(1, fmt="BMP")), "image/png", "not supported"),
        (b64(screenshot(1)[:200]), "image/png", "corrupt"),
    ],
)
async def test_bad_images_are_dialect_400s(
    gateway: Gateway, data: str, media_type: str, why: str
) -> None:
    r = await new_rollout(gateway)
    with pytest.raises(anthropic.BadRequestError) as ant:
        await anthropic_client(r).messages.create(
            model="m",
            max_tokens=8,
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": media_type, "data": data},  # type: ignore[typeddict-item]
                        },
                    ],
                },
            ],
        )
    error = ant.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert "messages[2].content[1].source.data" in error["message"] and why in error["message"]
    with pytest.raises(openai.BadRequestError) as oai:
        await openai_client(r).chat.completions.create(
            model="m",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:{media_type};base64,{data}"},
                        },
                    ],
                }
            ],
        )
    assert oai.value.body["param"] == "messages[0].content[1].image_url.url"  # type: ignore[index]
    assert why in oai.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as resp:
        await openai_client(r).responses.create(
            model="m",
            input=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "input_image",
                            "image_url": f"data:{media_type};base64,{data}",
                            "detail": "auto",
                        }
                    ],
                }
            ],
        )
    assert resp.value.body["param"] == "input[0].content[0].image_url"  # type: ignore[index]
    calls = await gateway.store.calls(r["rollout_id"])
    assert [c.status for c in calls] == ["rejected"] * 3
    assert await gateway.store.blob_bytes() == 0


async def test_image_over_the_size_limit(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    shot = screenshot(3)
    monkeypatch.setattr(images_module, "MAX_IMAGE_BYTES", len(shot) - 1)
    r = await new_rollout(gateway)
    with pytest.raises(openai.BadRequestError, match="exceed the limit") as oai:
        await openai_client(r).chat.completions.create(
            model="m", messages=[{"role": "user", "content": [_chat_image(shot)]}]
        )
    assert oai.value.body["param"] == "messages[0].content[0].image_url.url"  # type: ignore[index]


class _Images(BaseHTTPRequestHandler):
    """Serves ``/shot.png`` (a PNG), ``/big.png`` (too large) and ``/slow.png`` (too slow)."""

    shot = screenshot(11)

    def do_GET(self) -> None:
        if self.path == "/slow.png":
            threading.Event().wait(3.0)
        body = self.shot * (50 if self.path == "/big.png" else 1)
        try:
            self.send_response(200 if self.path != "/missing.png" else 404)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway gave up first (the size and time limits under test)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture
def image_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_url_images_off_by_default(gateway: Gateway, image_server: str) -> None:
    r = await new_rollout(gateway)
    with pytest.raises(anthropic.BadRequestError, match="does not fetch image URLs"):
        await anthropic_client(r).messages.create(
            model="m",
            max_tokens=8,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "url", "url": f"{image_server}/shot.png"},
                        }
                    ],
                }
            ],
        )


async def test_url_images_fetched_when_allowed(make_gateway: Any, image_server: str) -> None:
    limits = Limits(
        fetch_image_urls=True,
        image_fetch_max_bytes=len(_Images.shot) * 10,
        image_fetch_timeout_s=0.5,
    )
    async with make_gateway(limits=limits) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)

        async def ask(path: str) -> Any:
            return await client.chat.completions.create(
                model="m",
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": image_server + path}}
                        ],
                    }
                ],
            )

        await ask("/shot.png")
        for path, why in [
            ("/big.png", "larger than"),
            ("/slow.png", "did not arrive within"),
            ("/missing.png", "HTTP 404"),
        ]:
            with pytest.raises(openai.BadRequestError, match=why) as err:
                await ask(path)
            assert err.value.body["param"] == "messages[0].content[0].image_url.url"  # type: ignore[index]
        calls = await gw.store.calls(r["rollout_id"])
        image = calls[0].conversation["messages"][0]["content"][0]
        assert image["url"] == image_server + "/shot.png"
        assert image["sha256"] == hashlib.sha256(_Images.shot).hexdigest()
        blob = await gw.store.get_blob(image["sha256"])
        assert blob is not None and blob.data == _Images.shot
        assert (
            orjson.loads(calls[0].raw_request or b"{}")["messages"][0]["content"][0]["image_url"][
                "url"
            ]
            == image_server + "/shot.png"
        )
