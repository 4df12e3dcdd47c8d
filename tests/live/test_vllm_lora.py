"""LoRA at run time on the live vLLM: ``VLLMEngine.load_adapter`` loads a PEFT adapter
(``/v1/load_lora_adapter``), routes the client's requests to it by name and stamps its
version; loading another in place under the same name replaces it; the base model is
still served under its own name."""

from __future__ import annotations

import warnings
from pathlib import Path

import httpx
import pytest
import torch

from openforge.conversation import SamplingParams
from openforge.engines.base import EngineRequest
from openforge.engines.vllm import VLLMEngine

from .test_vllm_engine import QUESTION, chat_prompt, collect, ids_of
from .vllm_server import MAX_LORA_RANK, SERVED, VLLMServer

pytestmark = pytest.mark.timeout(900)


def make_adapter(base: Path, target: Path, seed: int) -> Path:
    """A PEFT LoRA adapter of ``base`` with random weights (no longer the identity)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    config = LoraConfig(r=MAX_LORA_RANK, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                        init_lora_weights=False)  # fmt: skip
    with warnings.catch_warnings():  # peft 0.21 asks transformers 5 a deprecated property
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
        adapted = get_peft_model(model, config)
    with torch.no_grad():  # large enough to move the greedy answer
        for name, weight in adapted.named_parameters():
            if "lora_" in name:
                weight.normal_(0.0, 0.1)
    adapted.save_pretrained(str(target))
    return target


async def test_an_adapter_loaded_at_run_time_serves_the_policy_name(
    live_vllm: VLLMServer, smollm2: Path, tmp_path: Path
) -> None:
    prompt = chat_prompt(smollm2, QUESTION)
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    first = make_adapter(smollm2, tmp_path / "a1", 1)
    second = make_adapter(smollm2, tmp_path / "a2", 2)
    policy = VLLMEngine(live_vllm.url, model=SERVED)
    base = VLLMEngine(live_vllm.url, model=SERVED)
    try:
        before = ids_of((await collect(policy, EngineRequest(prompt, greedy)))[0])[0]
        await policy.load_adapter("policy", str(first), "1")
        one = ids_of((await collect(policy, EngineRequest(prompt, greedy)))[0])[0]
        assert policy.info().weight_version == "1" and policy.info().model == "policy"
        await policy.load_adapter("policy", str(second), "2")
        two = ids_of((await collect(policy, EngineRequest(prompt, greedy)))[0])[0]
        again = ids_of((await collect(base, EngineRequest(prompt, greedy)))[0])[0]
    finally:
        async with httpx.AsyncClient() as client:
            await client.post(live_vllm.url + "/v1/unload_lora_adapter",
                              json={"lora_name": "policy"})  # fmt: skip
        await policy.close()
        await base.close()
    assert one != before and two != one
    assert again == before  # the base model, untouched
