"""Structured outputs: constrained decoding on the local engine, and the remote mappings."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import torch

from openforge.conversation import ResponseFormat, SamplingParams
from openforge.engines.base import EngineRequest, EngineRequestError, PromptImage
from openforge.engines.local import LocalEngine
from openforge.engines.sglang import SGLangEngine
from openforge.engines.vllm import VLLMEngine

CLICK = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["click", "scroll", "done"]},
        "index": {"type": "integer", "minimum": 0, "maximum": 99},
        "confident": {"type": "boolean"},
    },
    "required": ["action", "index", "confident"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    eng = LocalEngine("tiny", threads=1)
    yield eng
    asyncio.run(eng.close())


async def generate(
    engine: LocalEngine, prompt: list[int], **params: Any
) -> tuple[list[int], list[float], str]:
    ids: list[int] = []
    logprobs: list[float] = []
    finish = ""
    request = EngineRequest(prompt_ids=prompt, params=SamplingParams(**params))
    async for chunk in engine.generate(request):
        ids += chunk.ids
        logprobs += chunk.logprobs
        finish = chunk.finish_reason or finish
    return ids, logprobs, finish


def text_of(engine: LocalEngine, ids: list[int]) -> str:
    return str(engine.tokenizer.decode([i for i in ids if i not in engine.eos_ids]))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_model_output_conforms(engine: LocalEngine, seed: int) -> None:
    """A randomly initialised model says nothing sensible, yet every answer fits the schema."""
    prompt = engine.tokenizer.encode("Pick an element:")
    fmt = ResponseFormat("json_schema", CLICK, "click", True)
    ids, _, finish = await generate(
        engine, prompt, max_tokens=200, temperature=1.0, seed=seed, response_format=fmt
    )
    assert finish == "stop" and ids[-1] in engine.eos_ids
    jsonschema.validate(json.loads(text_of(engine, ids)), CLICK)


async def test_json_object_mode(engine: LocalEngine) -> None:
    prompt = engine.tokenizer.encode("Anything:")
    fmt = ResponseFormat("json_object")
    ids, _, finish = await generate(
        engine, prompt, max_tokens=300, temperature=0.7, seed=5, response_format=fmt
    )
    text = text_of(engine, ids)
    if finish == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # out of budget mid-object: still a prefix of one
        assert finish == "length" and text.startswith("{")


async def test_logprobs_are_those_of_the_constrained_distribution(engine: LocalEngine) -> None:
    """Re-score the sampled ids with one plain forward pass and the same grammar's masks."""
    prompt = engine.tokenizer.encode("Pick:")
    fmt = ResponseFormat("json_schema", CLICK, "click", True)
    ids, logprobs, _ = await generate(
        engine, prompt, max_tokens=60, temperature=1.0, seed=9, response_format=fmt
    )
    with torch.inference_mode():
        logits = engine.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    constraint = engine.grammars.matcher(fmt)
    free = torch.log_softmax(logits.float(), dim=-1)
    masked_below_free = 0
    for i, token in enumerate(ids):
        allowed = constraint.mask()
        row = logits[i].float().masked_fill(~allowed, float("-inf"))
        expected = torch.log_softmax(row, dim=-1)[token]
        assert logprobs[i] == pytest.approx(float(expected), abs=1e-4)
        masked_below_free += float(free[i, token]) < logprobs[i] - 1e-6
        constraint.advance(token)
    assert masked_below_free > 0  # the grammar did change the distribution


async def test_bad_schema_is_a_request_error(engine: LocalEngine) -> None:
    fmt = ResponseFormat("json_schema", {"type": "no-such-type"}, "bad", True)
    with pytest.raises(EngineRequestError, match="no-such-type"):
        await generate(engine, [1, 2, 3], max_tokens=4, response_format=fmt)


def _request(fmt: ResponseFormat | None) -> EngineRequest:
    return EngineRequest(
        prompt_ids=[1, 2, 3], params=SamplingParams(max_tokens=8, response_format=fmt)
    )


def test_vllm_and_sglang_parameters() -> None:
    vllm = VLLMEngine("http://127.0.0.1:9", model="m", context_length=4096)
    sglang = SGLangEngine("http://127.0.0.1:9", model="m", context_length=4096)
    schema = ResponseFormat("json_schema", CLICK, "click", True)
    anything = ResponseFormat("json_object")
    assert vllm.payload(_request(schema))["structured_outputs"] == {
        "json": CLICK,
        "disable_any_whitespace": True,
    }
    assert vllm.payload(_request(anything))["structured_outputs"] == {
        "json_object": True,
        "disable_any_whitespace": True,
    }
    assert "structured_outputs" not in vllm.payload(_request(None))
    sampling = sglang.payload(_request(schema))["sampling_params"]
    assert json.loads(sampling["json_schema"]) == CLICK
    assert json.loads(sglang.payload(_request(anything))["sampling_params"]["json_schema"]) == {
        "type": "object"
    }
    assert "json_schema" not in sglang.payload(_request(None))["sampling_params"]


def test_images_reach_sglang_as_image_data_and_vllm_refuses_them() -> None:
    png = b"\x89PNG\r\n\x1a\nrest"
    image = PromptImage(png, "image/png", "ab" * 32)
    request = EngineRequest(prompt_ids=[1, 2, 3], params=SamplingParams(), images=[image])
    sglang = SGLangEngine("http://127.0.0.1:9", model="m", context_length=4096)
    body = sglang.payload(request)
    assert body["image_data"] == ["data:image/png;base64," + base64.b64encode(png).decode()]
    assert body["input_ids"] == [1, 2, 3]
    vllm = VLLMEngine("http://127.0.0.1:9", model="m", context_length=4096)
    with pytest.raises(EngineRequestError, match="takes no images"):
        vllm.payload(request)
