"""What a rollout leaves for the cyclic GC.

A rollout's state lives as long as the rollout. When many rollouts start each second, that
state is most of what each young collection walks and moves on to the older generations
(docs/gateway.md, "The cyclic GC"), so its count of GC-tracked objects is kept small.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import weakref
from collections import Counter
from collections.abc import Callable

import httpx
import orjson
import pytest

from openforge.gateway import cyclic_gc
from openforge.gateway.server import Gateway

# Measured 18 (29 before the rollout state made its rarely used parts on demand).
MAX_TRACKED_PER_NEW_ROLLOUT = 20


def _body(i: int) -> bytes:
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "bash", "arguments": '{"command": "ls src"}'}
    return orjson.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "You are a coding agent. " * 40},
                {"role": "user", "content": "Find why the tests fail and fix it."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": f"file_{i}.py\n" * 30},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "description": "Run a shell command.",
                        "parameters": {
                            "type": "object",
                            "properties": {"command": {"type": "string"}},
                            "required": ["command"],
                        },
                    },
                }
            ],
        }
    )


def _tracked() -> Counter[str]:
    # A running gateway freezes what survives each collection (gateway/cyclic_gc.py), and
    # gc.get_objects() leaves frozen objects out.
    gc.unfreeze()
    gc.collect()
    gc.unfreeze()
    objects = gc.get_objects()
    # A call's body deadline (asyncio.timeout) leaves a cancelled TimerHandle, holding the
    # call's context, in the loop's heap until asyncio purges it (only once cancelled
    # handles are over half of a heap of 100 or more): how many still wait there depends
    # on the loop's timing (60 of 60 once in CI under load, none when quiet), not on what
    # a rollout keeps.
    waiting = {
        id(o)
        for h in objects
        if type(h) is asyncio.TimerHandle and h.cancelled()
        for o in (h, *gc.get_referents(h))
        if o is h or type(o) is contextvars.Context
    }
    # Dead weak references left out: an sqlite3 connection keeps one per cursor it made
    # and drops them every 200 cursors, so their count swings with the calls.
    return Counter(
        type(o).__qualname__
        for o in objects
        if id(o) not in waiting and not (type(o) is weakref.ref and o() is None)
    )


async def test_a_new_rollouts_first_call_leaves_few_objects_for_the_cyclic_gc(
    make_gateway: Callable[..., Gateway],
) -> None:
    gw = make_gateway([{"text": "The tests pass now."}])
    async with gw, httpx.AsyncClient(base_url=gw.url, timeout=60) as client:

        async def call(key: str, i: int) -> None:
            headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
            r = await client.post("/v1/chat/completions", content=_body(i), headers=headers)
            assert r.status_code == 200, r.text

        # Shared caches (the system prompt's and tools' ids, the tools' schema) fill on
        # the first calls; the connection is made once.
        for i in range(20):
            await call((await gw.store.create_rollout()).key, i)
        n = 60
        keys = [(await gw.store.create_rollout()).key for _ in range(n)]
        before = _tracked()
        for i, key in enumerate(keys):
            await call(key, 100 + i)
        grown = _tracked() - before
    per_rollout = sum(grown.values()) / n
    assert per_rollout <= MAX_TRACKED_PER_NEW_ROLLOUT, grown.most_common(20)


class _Node:
    """An object in a reference cycle, which only the cyclic GC frees."""

    def __init__(self) -> None:
        self.me = self


async def test_survivors_are_frozen_and_their_cycles_reclaimed_when_the_gateway_is_quiet(
    make_gateway: Callable[..., Gateway], monkeypatch: pytest.MonkeyPatch
) -> None:
    thresholds = gc.get_threshold()
    gw = make_gateway([{"text": "Done."}])
    async with gw, httpx.AsyncClient(base_url=gw.url, timeout=60) as client:
        assert gc.get_threshold()[0] == cyclic_gc.GC_YOUNG_THRESHOLD
        node = _Node()
        alive = weakref.ref(node)
        gc.collect()  # node survives it: frozen, no later collection walks it
        assert gc.get_freeze_count() > 0 and all(o is not node for o in gc.get_objects())
        del node
        gc.collect()
        assert alive() is not None  # garbage now, but frozen
        # The next quiet moment reclaims it: no call in flight once this one is answered.
        monkeypatch.setattr(cyclic_gc, "RECLAIM_QUIET_S", 0.0)
        key = (await gw.store.create_rollout()).key
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        r = await client.post("/v1/chat/completions", content=_body(0), headers=headers)
        assert r.status_code == 200, r.text
        for _ in range(100):
            if alive() is None:
                break
            await asyncio.sleep(0.01)
        assert alive() is None
    # The last gateway gone, the collector runs as it did before.
    assert gc.get_threshold() == thresholds
    assert not any(cb.__module__ == cyclic_gc.__name__ for cb in gc.callbacks)
