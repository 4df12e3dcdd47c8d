"""Tiny tokenizers for each model family, for tests: no model weights can be had here.

Each is a byte-level BPE trained on a few lines of text, with the family's special (and
non-special added) tokens added as the real vocabularies have them, its eos and stop ids,
and a chat template written in the family's published shape (``family_templates/``). They
exercise everything rendering and parsing do with a real model directory: detection,
special-token handling, ``apply_chat_template``, splicing sampled replies into prompts. A
real model directory works the same way (docs/rendering.md: ``OPENFORGE_FAMILY_MODEL``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TINY_FAMILIES", "TinyFamily", "build_tiny_family"]

_TEMPLATES = Path(__file__).with_name("family_templates")


@dataclass(frozen=True, slots=True)
class TinyFamily:
    template: str  # file in family_templates/
    special: tuple[str, ...]  # special tokens (dropped by a plain decode)
    added: tuple[str, ...]  # added tokens that are not special
    eos: str
    stops: tuple[str, ...] = ()  # generation_config's further eos ids
    model_type: str = ""


def _tokens(words: str) -> tuple[str, ...]:
    return tuple(words.split())


TINY_FAMILIES: dict[str, TinyFamily] = {
    "qwen3_coder": TinyFamily(
        "qwen3_coder.jinja",
        _tokens("<|im_start|> <|im_end|> <|endoftext|>"),
        _tokens("<tool_call> </tool_call> <think> </think> <tool_response> </tool_response>"),
        "<|im_end|>",
        ("<|endoftext|>",),
        "qwen3_moe",
    ),
    "gpt_oss": TinyFamily(
        "gpt_oss.jinja",
        _tokens(
            "<|start|> <|end|> <|message|> <|channel|> <|constrain|> <|return|> <|call|> "
            "<|endoftext|>"
        ),
        (),
        "<|return|>",
        ("<|call|>", "<|endoftext|>"),
        "gpt_oss",
    ),
    "llama3_json": TinyFamily(
        "llama3_json.jinja",
        _tokens(
            "<|begin_of_text|> <|end_of_text|> <|start_header_id|> <|end_header_id|> "
            "<|eot_id|> <|eom_id|> <|python_tag|>"
        ),
        (),
        "<|eot_id|>",
        ("<|end_of_text|>", "<|eom_id|>"),
        "llama",
    ),
    "mistral": TinyFamily(
        "mistral.jinja",
        _tokens(
            "<s> </s> [INST] [/INST] [TOOL_CALLS] [ARGS] [AVAILABLE_TOOLS] [/AVAILABLE_TOOLS] "
            "[TOOL_RESULTS] [/TOOL_RESULTS] [SYSTEM_PROMPT] [/SYSTEM_PROMPT] [THINK] [/THINK]"
        ),
        (),
        "</s>",
        (),
        "mistral",
    ),
    "kimi_k2": TinyFamily(
        "kimi_k2.jinja",
        _tokens(
            "<|im_system|> <|im_user|> <|im_assistant|> <|im_middle|> <|im_end|> "
            "<|tool_calls_section_begin|> <|tool_calls_section_end|> <|tool_call_begin|> "
            "<|tool_call_argument_begin|> <|tool_call_end|>"
        ),
        ("<think>", "</think>"),
        "<|im_end|>",
        (),
        "kimi_k2",
    ),
    "deepseek_v31": TinyFamily(
        "deepseek_v31.jinja",
        # DeepSeek's tool markers are added tokens, not special ones: a plain decode keeps them.
        _tokens("<｜begin▁of▁sentence｜> <｜end▁of▁sentence｜> <｜User｜> <｜Assistant｜>"),
        _tokens(
            "<｜tool▁calls▁begin｜> <｜tool▁calls▁end｜> <｜tool▁call▁begin｜> <｜tool▁call▁end｜> "
            "<｜tool▁sep｜> <｜tool▁output▁begin｜> <｜tool▁output▁end｜> <think> </think>"
        ),
        "<｜end▁of▁sentence｜>",
        (),
        "deepseek_v3",
    ),
    "glm45": TinyFamily(
        "glm45.jinja",
        _tokens("[gMASK] <sop> <|system|> <|user|> <|assistant|> <|observation|> <|endoftext|>"),
        _tokens(
            "<tool_call> </tool_call> <arg_key> </arg_key> <arg_value> </arg_value> <think> "
            "</think> <tool_response> </tool_response>"
        ),
        "<|endoftext|>",
        ("<|user|>", "<|observation|>"),
        "glm4_moe",
    ),
}

# Text the BPE learns its merges from: enough English, JSON and code to give it real
# multi-byte merges, and characters beyond ASCII so those are split across tokens.
_CORPUS = [
    "The quick brown fox jumps over the lazy dog. Run the command and read the file.",
    '{"name": "bash", "arguments": {"command": "ls -la /tmp", "timeout": 30}}',
    "def main():\n    print('hello world')\n    return 0\n",
    "Résumé naïve café — 日本語のテキスト 🤖 emoji and ünïcödé are split into bytes.",
    "<parameter=path>\nsrc/main.py\n</parameter>\n</function>\nfunctions.read_file:0",
    "analysis commentary final assistant user system tool to=functions.get_weather json",
]


def build_tiny_family(name: str, dest: Path) -> Path:
    """Write family ``name``'s tiny model directory into ``dest`` (created); return it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    spec = TINY_FAMILIES[name]
    dest.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    tok.add_special_tokens(list(spec.special))
    tok.add_tokens(list(spec.added))
    tok.save(str(dest / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in (*spec.special, *spec.added)}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": spec.eos,
        "model_max_length": 131072,
        "added_tokens_decoder": {
            str(ids[t]): {
                "content": t,
                "special": t in spec.special,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for t in (*spec.special, *spec.added)
        },
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False))
    (dest / "chat_template.jinja").write_text((_TEMPLATES / spec.template).read_text())
    eos = [ids[spec.eos], *(ids[t] for t in spec.stops)]
    (dest / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    model = {"model_type": spec.model_type, "architectures": [], "vocab_size": tok.get_vocab_size()}
    (dest / "config.json").write_text(json.dumps(model))
    return dest
