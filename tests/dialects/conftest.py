"""Shared pieces: recorded harness bodies and real SDK clients over in-memory transports.

The SDK clients are the real ``openai`` and ``anthropic`` clients with their own
parsers and stream accumulators; only the HTTP transport is replaced by one that
answers with the bytes our dialect produced.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx2 as httpx  # the SDKs are built on httpx2; the transport must be its own
import openai
import pytest

# The shared fixtures lie beside the checkout (../shared); the repo keeps its own copy too.
CHECKOUT = Path(__file__).resolve().parents[2]
FIXTURES = CHECKOUT.parent / "shared" / "fixtures" / "harness-requests"
REPO_FIXTURES = Path(__file__).parent / "fixtures"


def _fixture_bytes(name: str) -> bytes:
    for root in (FIXTURES, REPO_FIXTURES):
        path = root / name
        if path.exists():
            return path.read_bytes()
    pytest.fail(f"recorded fixture {name} is in neither {FIXTURES} nor {REPO_FIXTURES}")


@pytest.fixture
def harness_body() -> Callable[[str], bytes]:
    """Reads a recorded harness request body (shared fixtures, else the repo's copy)."""
    return _fixture_bytes


Reply = tuple[int, bytes, str]


def _transport(reply: Reply, seen: list[httpx.Request]) -> httpx.MockTransport:
    status, body, media_type = reply

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body, headers={"content-type": media_type})

    return httpx.MockTransport(handler)


@pytest.fixture
def openai_client() -> Callable[[Reply], openai.OpenAI]:
    def make(reply: Reply) -> openai.OpenAI:
        http = httpx.Client(transport=_transport(reply, []))
        return openai.OpenAI(
            api_key="test", base_url="http://gateway.test/v1", http_client=http, max_retries=0
        )

    return make


@pytest.fixture
def anthropic_client() -> Callable[[Reply], anthropic.Anthropic]:
    def make(reply: Reply) -> anthropic.Anthropic:
        http = httpx.Client(transport=_transport(reply, []))
        return anthropic.Anthropic(
            api_key="test", base_url="http://gateway.test", http_client=http, max_retries=0
        )

    return make
