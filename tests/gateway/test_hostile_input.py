"""Hostile, huge and slow input: every refusal is JSON in the caller's dialect, nothing already
answered is lost, and one client cannot hold the gateway (deadlines, sizes, counts, depth)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from openforge.dialects.errors import MAX_DEPTH
from openforge.gateway.limits import Limits
from openforge.rollouts.config import RolloutConfig

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


def _chat_bad() -> list[tuple[dict[str, Any], str]]:
    """Chat bodies OpenAI refuses, each with the field the refusal names."""
    call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    asked = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "x"}
    ls = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}
    return [
        ({"messages": [*USER, {**answer, "tool_call_id": "call_9"}]}, "messages[1].tool_call_id"),
        ({"messages": [*USER, asked, asked]}, "messages[2].tool_calls"),
        ({"messages": [*USER, asked, answer, answer]}, "messages[3].tool_call_id"),
        ({"messages": []}, "messages"),
        (
            {
                "messages": USER,
                "tools": [ls],
                "tool_choice": {"type": "function", "function": {"name": "rm"}},
            },
            "tool_choice.function.name",
        ),
        ({"messages": USER, "reasoning_effort": "maximal"}, "reasoning_effort"),
    ]


def _responses_bad() -> list[tuple[dict[str, Any], str]]:
    out = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    fc = {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}
    hi = {"type": "message", "role": "user", "content": "hi"}
    fn = {"type": "function", "name": "ls", "parameters": {"type": "object"}}
    return [
        ({"input": [hi, out]}, "input[1].call_id"),
        ({"input": [hi, fc, fc]}, "input[1].call_id"),
        ({"input": []}, "input"),
        ({"input": [hi, {"type": "telepathy"}]}, "input[1].type"),
        ({"input": [hi, {"type": "web_search_call", "id": "ws_1"}]}, "input[1].type"),
        (
            {"input": [hi], "tools": [fn], "tool_choice": {"type": "function", "name": "rm"}},
            "tool_choice.name",
        ),
        ({"input": [hi], "reasoning": {"effort": "ultra"}}, "reasoning.effort"),
    ]


def _anthropic_bad() -> list[tuple[dict[str, Any], str]]:
    use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"}
    asked = {"role": "assistant", "content": [use]}
    bash = {"name": "Bash", "input_schema": {"type": "object"}}
    return [
        ({"messages": [*USER, {"role": "user", "content": [result]}]}, "messages[1].content"),
        (
            {"messages": [*USER, asked, {"role": "user", "content": [result]}, asked]},
            "messages[3].content",
        ),
        ({"messages": []}, "messages"),
        (
            {"messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {"messages": USER, "tools": [bash], "tool_choice": {"type": "tool", "name": "Rm"}},
            "tool_choice.name",
        ),
        (
            {"messages": USER, "thinking": {"type": "enabled", "budget_tokens": -1}},
            "thinking.budget_tokens",
        ),
    ]


async def test_what_vendors_refuse_is_refused_in_the_dialect(make_gateway: Any) -> None:
    """Each body a vendor's API refuses gets 400 in its caller's envelope, naming the field;
    each refusal is recorded, and the rollout's next good call is served."""
    async with make_gateway(TEXT * 3) as gw, httpx.AsyncClient() as c:
        r = await new_rollout(gw)
        sent = 0
        for path, bad in (
            ("/v1/chat/completions", _chat_bad()),
            ("/v1/responses", _responses_bad()),
            ("/v1/messages", _anthropic_bad()),
        ):
            for body, param in bad:
                got = await c.post(
                    r["base_url"] + path, json={"model": "m", "max_tokens": 1100, **body}
                )
                sent += 1
                assert got.status_code == 400, (path, body, got.text)
                error = got.json()["error"]
                if path == "/v1/messages":
                    assert got.json()["type"] == "error"
                    assert error["type"] == "invalid_request_error" and error["message"]
                else:
                    assert error["type"] == "invalid_request_error" and error["param"] == param
        # Through the SDKs, as a harness sees them.
        orphan = [*USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]
        async with openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x") as client:
            with pytest.raises(openai.BadRequestError) as err:
                await client.chat.completions.create(model="m", messages=orphan)  # type: ignore[arg-type]
            assert "call_9" in err.value.message
            stray_output = {"type": "function_call_output", "call_id": "c9", "output": "x"}
            with pytest.raises(openai.BadRequestError) as rerr:
                await client.responses.create(model="m", input=[stray_output])  # type: ignore[list-item]
            assert "c9" in rerr.value.message
            ok = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            assert ok.choices[0].message.content == "ok"
        stray = {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}
        async with anthropic.AsyncAnthropic(base_url=r["anthropic_base_url"], api_key="x") as a:
            with pytest.raises(anthropic.BadRequestError) as aerr:
                await a.messages.create(
                    model="m", max_tokens=5, messages=[*USER, {"role": "user", "content": [stray]}]
                )  # type: ignore[list-item]
            assert "toolu_9" in aerr.value.message
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
        statuses = [c["status"] for c in calls]
        assert statuses == ["rejected"] * (sent + 2) + ["ok", "rejected"]


async def test_a_declared_huge_body_is_refused_at_once(make_gateway: Any) -> None:
    """A Content-Length of 10 GB: 413 in the dialect at once (not after the body deadline),
    on both listeners; the gateway serves on."""
    async with make_gateway(TEXT) as gw:
        r = await new_rollout(gw)
        for port, path, shape in (
            (gw.port, f"/r/{r['key']}/v1/chat/completions", "openai"),
            (gw.port, f"/r/{r['key']}/v1/messages", "anthropic"),
            (gw.admin_port, "/admin/rollouts", "admin"),
        ):
            rd, w = await asyncio.open_connection("127.0.0.1", port)
            auth = f"authorization: Bearer {gw.admin_token}\r\n" if shape == "admin" else ""
            w.write(
                f"POST {path} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n{auth}"
                f"content-length: {10 << 30}\r\n\r\n{{".encode()
            )
            await w.drain()
            # The body deadline is 120 s: an answer within 10 s is one that did not wait.
            raw = await asyncio.wait_for(rd.readuntil(b"}}"), 10)
            w.close()
            assert raw.startswith(b"HTTP/1.1 413"), raw[:200]
            body = orjson.loads(_body(raw + await _rest(rd)))
            if shape == "openai":
                assert body["error"]["code"] == "request_too_large"
            else:
                assert body["error"]["type"] == "request_too_large"
            if shape == "anthropic":
                assert body["type"] == "error"
        async with openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x") as client:
            ok = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        assert ok.choices[0].message.content == "ok"


async def _rest(reader: asyncio.StreamReader) -> bytes:
    """What is left of a response already read to its last ``}}`` (nothing, or a chunk end)."""
    try:
        return await asyncio.wait_for(reader.read(100), 0.2)
    except TimeoutError:
        return b""


class _Prober:
    """Probes the admin listener's ``/health`` from a thread of its own (as the orchestrator
    does from its process), so a busy gateway loop cannot delay the probe's own sending."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answered: list[tuple[float, float, int]] = []  # (sent, answered, status)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as c:
            while not self.stop.is_set():
                sent = time.monotonic()
                status = c.get(self.url + "/health").status_code
                self.answered.append((sent, time.monotonic(), status))
                self.stop.wait(0.05)


async def test_health_answers_while_the_gateway_loop_is_blocked(make_gateway: Any) -> None:
    """The admin listener serves on its own thread: while the gateway's event loop is held
    (as a huge call's synchronous work holds it), the probe is answered before it is free;
    admin requests other than the probe run on the gateway's loop as before."""
    async with make_gateway(TEXT) as gw:
        prober = _Prober(gw.control_url)
        prober.thread.start()
        time.sleep(3.0)  # the gateway's loop (this one) is held: nothing on it runs
        freed = time.monotonic()
        prober.stop.set()
        await asyncio.to_thread(prober.thread.join)
        during = [a for s, a, status in prober.answered if a < freed and status == 200]
        assert during, prober.answered
        r = await new_rollout(gw)  # the admin API itself, through the bridge
        async with httpx.AsyncClient() as c:
            head = await c.head(gw.control_url + "/")
            assert head.status_code == 200 and head.content == b""
            listed = await c.get(gw.admin_url + "/rollouts", headers=gw.admin_headers)
            assert r["rollout_id"] in listed.text


async def test_health_answers_while_huge_bodies_are_served(make_gateway: Any) -> None:
    """Two 16 MB bodies and 200 idle connections: every probe is answered within the
    orchestrator's deadline, and probes are answered while the huge calls run."""
    async with make_gateway(TEXT * 2, max_context=8192) as gw:
        idle = []
        for _ in range(200):
            rd, w = await asyncio.open_connection("127.0.0.1", gw.port)
            w.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            await w.drain()
            await rd.readuntil(b'{"status":"ok"}')
            idle.append(w)
        text = "log line with some words in it\n" * (16 * (1 << 20) // 31)
        body = orjson.dumps(
            {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": text}]}
        )
        rollouts = [await new_rollout(gw) for _ in range(2)]
        prober = _Prober(gw.control_url)
        prober.thread.start()
        began = time.monotonic()
        async with httpx.AsyncClient(timeout=600) as c:
            answers = await asyncio.gather(
                *(
                    c.post(r["openai_base_url"] + "/chat/completions", content=body)
                    for r in rollouts
                )
            )
        ended = time.monotonic()
        prober.stop.set()
        await asyncio.to_thread(prober.thread.join)
        for w in idle:
            w.close()
        # Over SmolLM2's context here: refused after parsing and rendering, as they were.
        assert [a.status_code for a in answers] == [400, 400]
        limit = RolloutConfig.__dataclass_fields__["health_timeout_s"].default
        assert all(status == 200 for _, _, status in prober.answered)
        assert max(a - s for s, a, _ in prober.answered) < limit  # type: ignore[operator]
        assert any(began < a < ended for _, a, _ in prober.answered), (began, ended)
