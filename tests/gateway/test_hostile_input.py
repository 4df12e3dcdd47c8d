"""Hostile, huge and slow input: every refusal is JSON in the caller's dialect, nothing already
answered is lost, and one client cannot hold the gateway (deadlines, sizes, counts, depth)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from openforge.dialects.errors import MAX_DEPTH
from openforge.gateway.limits import Limits

from .conftest import new_rollout, rollout_calls

TEXT = [{"text": "ok"}]
USER = [{"role": "user", "content": "hi"}]


def _body(raw: bytes) -> bytes:
    """The body of one raw HTTP/1.1 response, chunked or not."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return rest
    out = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def _nested(depth: int) -> Any:
    value: Any = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"x": value}}
    return value


async def test_admin_routes_do_not_exist_on_the_model_listener(make_gateway: Any) -> None:
    async with make_gateway(TEXT) as gw, httpx.AsyncClient() as c:
        r = await new_rollout(gw)
        for url in (gw.url, r["base_url"]):
            for method, path in (("GET", "/admin/rollouts"), ("POST", "/admin/pause")):
                got = await c.request(method, url + path, headers=gw.admin_headers)
                assert got.status_code == 404 and got.json()["error"]["message"], got.text
        # The admin listener refuses a missing or wrong token, in JSON.
        assert (await c.get(gw.admin_url + "/rollouts")).status_code == 401
        bad = {"Authorization": "Bearer " + r["key"]}  # a rollout key is not the admin token
        assert (await c.get(gw.admin_url + "/rollouts", headers=bad)).status_code == 401


async def test_unknown_routes_and_methods_are_json_in_the_dialect(make_gateway: Any) -> None:
    async with make_gateway(TEXT) as gw, httpx.AsyncClient() as c:
        r = await new_rollout(gw)
        get_messages = await c.get(r["base_url"] + "/v1/messages")
        assert get_messages.status_code == 405
        assert get_messages.json()["type"] == "error"  # Anthropic's envelope
        get_chat = await c.get(gw.url + "/v1/chat/completions")
        assert get_chat.status_code == 405 and "message" in get_chat.json()["error"]  # OpenAI's
        nowhere = await c.post(gw.url + "/v2/nowhere", json={})
        assert nowhere.status_code == 404 and nowhere.json()["error"]["message"]
        admin_nowhere = await c.get(gw.control_url + "/admin/nowhere", headers=gw.admin_headers)
        assert admin_nowhere.status_code == 404 and admin_nowhere.json()["error"]["message"]


async def test_malformed_http_gets_a_json_400(make_gateway: Any) -> None:
    async with make_gateway(TEXT) as gw:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n")
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await writer.wait_closed()
        head = raw.partition(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head
        assert orjson.loads(_body(raw))["error"]["message"]


async def test_slow_headers_and_slow_bodies_are_cut_off(make_gateway: Any) -> None:
    limits = Limits(header_timeout_s=0.5, body_timeout_s=0.5)
    async with make_gateway(TEXT, limits=limits) as gw:
        r = await new_rollout(gw)
        # Slowloris: a request line, then nothing. Closed after the head deadline.
        loris = [await asyncio.open_connection("127.0.0.1", gw.port) for _ in range(20)]
        for _, w in loris:
            w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            await w.drain()
        for rd, w in loris:
            assert await asyncio.wait_for(rd.read(), 10) == b""  # closed by the gateway
            w.close()
        # A silent new connection is closed too.
        rd, w = await asyncio.open_connection("127.0.0.1", gw.port)
        assert await asyncio.wait_for(rd.read(), 10) == b""
        w.close()
        # A trickled body: headers in time, the body never completes -> 408 in the dialect.
        path = "/r/" + r["key"] + "/v1/chat/completions"
        rd, w = await asyncio.open_connection("127.0.0.1", gw.port)
        w.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            "content-length: 1000\r\n\r\n{".encode()
        )
        await w.drain()
        raw = await asyncio.wait_for(rd.read(65536), 10)
        assert raw.startswith(b"HTTP/1.1 408"), raw[:200]
        assert orjson.loads(_body(raw))["error"]["code"] == "request_timeout"
        w.close()
        # Meanwhile the gateway serves as usual.
        async with openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x") as client:
            ok = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        assert ok.choices[0].message.content == "ok"


async def test_oversized_bodies_are_413_in_the_dialect(make_gateway: Any) -> None:
    limits = Limits(max_body_bytes=200_000, max_admin_body_bytes=10_000)
    async with make_gateway(TEXT, limits=limits) as gw, httpx.AsyncClient() as c:
        r = await new_rollout(gw)
        huge_user = [{"role": "user", "content": "x" * 300_000}]
        big = {"model": "m", "max_tokens": 5, "messages": huge_user}
        chat = await c.post(r["openai_base_url"] + "/chat/completions", json=big)
        assert chat.status_code == 413 and chat.json()["error"]["code"] == "request_too_large"
        msg = await c.post(r["anthropic_base_url"] + "/v1/messages", json=big)
        assert msg.status_code == 413 and msg.json()["error"]["type"] == "request_too_large"
        admin = await c.post(
            gw.admin_url + "/rollouts",
            json={"metadata": {"blob": "x" * 20_000}},
            headers=gw.admin_headers,
        )
        assert admin.status_code == 413 and admin.json()["error"]["type"] == "request_too_large"


async def test_deep_json_is_a_400_and_recorded(make_gateway: Any) -> None:
    async with make_gateway(TEXT * 3) as gw:
        r = await new_rollout(gw)
        tool = {"type": "function", "function": {"name": "t", "parameters": _nested(300)}}
        async with openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x") as client:
            with pytest.raises(openai.BadRequestError) as err:
                await client.chat.completions.create(model="m", messages=USER, tools=[tool])  # type: ignore[arg-type, list-item]
            assert f"deeper than {MAX_DEPTH}" in err.value.body["message"]  # type: ignore[index]
            # Just inside the bound is served and stored.
            ok_tool = {"type": "function", "function": {"name": "t", "parameters": _nested(60)}}
            ok = await client.chat.completions.create(model="m", messages=USER, tools=[ok_tool])  # type: ignore[arg-type, list-item]
            assert ok.choices[0].message.content == "ok"
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
        assert [(c["seq"], c["status"]) for c in calls] == [(0, "rejected"), (1, "ok")]


async def test_tool_and_message_counts_are_capped(make_gateway: Any) -> None:
    limits = Limits(max_tools=8, max_messages=10)
    async with make_gateway(TEXT, limits=limits) as gw:
        r = await new_rollout(gw)
        tools = [
            {"name": f"t{i}", "description": "", "input_schema": {"type": "object"}}
            for i in range(9)
        ]
        async with anthropic.AsyncAnthropic(base_url=r["anthropic_base_url"], api_key="x") as c:
            with pytest.raises(anthropic.BadRequestError) as err:
                await c.messages.create(model="m", max_tokens=5, messages=USER, tools=tools)  # type: ignore[arg-type]
            assert "9 tools exceed" in err.value.message
            many = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}] * 6
            with pytest.raises(anthropic.BadRequestError) as err:
                await c.messages.create(model="m", max_tokens=5, messages=[*many, *USER])  # type: ignore[arg-type]
            assert "13 messages exceed" in err.value.message


@pytest.mark.parametrize(
    ("field", "value"), [("max_tokens", "100"), ("stream", "yes"), ("temperature", "0.5")]
)
async def test_scalars_are_not_coerced(make_gateway: Any, field: str, value: str) -> None:
    async with make_gateway(TEXT) as gw, httpx.AsyncClient() as c:
        r = await new_rollout(gw)
        body = {"model": "m", "messages": USER, field: value}
        got = await c.post(r["openai_base_url"] + "/chat/completions", json=body)
        assert got.status_code == 400 and got.json()["error"]["param"] == field, got.text


async def test_a_huge_body_does_not_stop_other_calls(make_gateway: Any) -> None:
    """10 MB in one call while 20 others run: they all complete (their latency is the
    bench's to report: bench/gateway.py --huge)."""
    async with make_gateway(TEXT * 40, max_context=8192) as gw:
        big_r = await new_rollout(gw)
        others = [await new_rollout(gw) for _ in range(20)]
        huge = [{"role": "user", "content": "word " * 2_000_000}]  # 10 MB

        async def one(r: dict[str, Any], messages: Any) -> str:
            async with openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x") as c:
                try:
                    out = await c.chat.completions.create(model="m", messages=messages)
                    return out.choices[0].message.content or ""
                except openai.BadRequestError as exc:  # over SmolLM2's context: a clean 400
                    return str(exc.code)

        results = await asyncio.gather(one(big_r, huge), *(one(r, USER) for r in others))
        assert results[0] == "context_length_exceeded"
        assert results[1:] == ["ok"] * 20
