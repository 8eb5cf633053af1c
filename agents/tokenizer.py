"""Train the tiny model's tokenizer: byte-level BPE with single-digit tokens and a ChatML chat template.

Design choices (and why):
- **Byte-level BPE** (initial alphabet = all 256 byte symbols, no normalizer): any string, including unicode and code,
  round-trips exactly, ``decode(encode(s)) == s``; there is no unknown token. ``Qwen2Tokenizer`` adds an NFC
  normalizer on reload, so ``agents.models.load_model_and_tokenizer`` loads ``tokenizer.json`` verbatim instead.
- **Digits are always single tokens**, and pre-tokenization is exactly Qwen2's: a regex split in which ``\\p{N}``
  matches one digit, then ``ByteLevel`` without its own regex. So no merge can span two digits, and a checkpoint
  reloaded with ``AutoTokenizer`` (which transformers 5 maps to ``Qwen2Tokenizer`` for every ``qwen2`` config, rebuilding
  this very pipeline) encodes every NFC string to the same ids as the trained tokenizer. Departure from the usual
  recipe (``Digits(individual_digits=True)`` before ``ByteLevel``): that pipeline tokenizes e.g. ``"  1"`` or ``"(x"``
  differently from the reloaded ``Qwen2Tokenizer``, so trainer and vLLM would disagree on prompts.
- **Special tokens** get the first ids, in this order: ``<|endoftext|>`` (pad, and bos in the model config),
  ``<|im_start|>``, ``<|im_end|>``, then ``extra_special_tokens``. They are never split and are cut out of the training
  text, so no merge is spent on their pieces.
- **eos = ``<|im_end|>``**: the token that closes an assistant turn in ChatML, so sampling stops at the end of the turn
  (Qwen2.5-Instruct does the same); ``<|endoftext|>`` is the pad token (never trained on: masked by attention).
- **Chat template**: plain ChatML for the roles system, user, assistant and tool, each message rendered as
  ``<|im_start|>{role}\\n{content}<|im_end|>\\n``; there is no default system prompt (a tiny model should not pay for
  tokens it never needs). Tool results are their own ``tool`` turns, so a transcript of any number of
  assistant → tool rounds renders unambiguously, and ``add_generation_prompt`` after a tool turn opens the next
  assistant turn. Assistant content sits in ``{% generation %}`` blocks, so ``return_assistant_tokens_mask=True`` works.
- **Deterministic**: a fixed built-in base corpus comes first, training is single-pass, and ties between equally
  frequent merges are broken by ``tokenizers`` on token ids, which are assigned in sorted order; same texts ⇒ same vocab.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Iterator

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (EOS_TOKEN, IM_START, IM_END)
# Qwen2's pre-tokenizer split (transformers, models/qwen2/tokenization_qwen2.py, PRETOKENIZE_REGEX): contractions,
# letters with one leading non-letter, ONE digit (\p{N}), punctuation runs, newlines, other whitespace.
QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{ raise_exception('chat template: message ' ~ loop.index0 ~ ' has unknown role ' ~ message['role']"
    " ~ '; valid roles: system, user, assistant, tool') }}"
    "{%- endif -%}"
    "{%- if message['content'] is not string -%}"
    "{{ raise_exception('chat template: message ' ~ loop.index0 ~ ' content must be a string') }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- generation -%}{{ message['content'] ~ '<|im_end|>' }}{%- endgeneration -%}"
    "{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' ~ message['role'] ~ '\\n' ~ message['content'] ~ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# The same ChatML, but an assistant message's `<think>` block shows only while it is the last message: earlier turns
# lose their thinking, as QwQ's and DeepSeek-R1's templates drop it (a reply's thinking is the text up to its first
# "</think>"; the rest, its leading newlines stripped, is the content). `model.chat_template=chatml_drop_thinking`.
DROP_THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{%- generation -%}{{ message['content'] ~ '<|im_end|>' }}{%- endgeneration -%}",
    "{%- set content = message['content'] -%}"
    "{%- if not loop.last and '</think>' in content -%}"
    "{%- set content = content.split('</think>', 1)[1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{%- generation -%}{{ content ~ '<|im_end|>' }}{%- endgeneration -%}")
CHAT_TEMPLATES = {"chatml": CHAT_TEMPLATE, "chatml_drop_thinking": DROP_THINKING_CHAT_TEMPLATE}
"""The tiny tokenizer's chat templates by name (`model.chat_template`)."""

# Fragments every alprl transcript is made of (code, tool results, answers, math words, role names), so merges exist
# for them even when the user corpus is small. Order matters only for determinism, which a tuple guarantees.
_CODE_FRAGMENTS = (
    "print(", "print(f\"", "```python\n", "```\n", "```output\n", "\\boxed{", "\\fbox{", "final_answer(",
    "Code execution result:", "Traceback (most recent call last):", "Error:", "import math\n", "import sympy\n",
    "from sympy import ", "def solve():\n", "    return ", "for i in range(", "while ", "if __name__ == \"__main__\":",
    "result = ", "answer = ", " = ", " == ", " != ", " += ", " -= ", " * ", " // ", " % ", " ** ", "()", "[]", "{}",
    "):\n", "    ", "        ", "\n\n", "sympy.solve(", "sympy.symbols(", "math.gcd(", "math.factorial(", "pow(",
    "len(", "sum(", "abs(", "int(", "str(", "list(", "sorted(", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "<think>", "</think>", "<action>", "</action>", "search[", "click[", "system", "user",
    "assistant", "tool",
)
_MATH_WORDS = (
    "Compute", "Calculate", "Find", "Solve", "What is", "the value of", "the remainder when", "is divided by",
    "modulo", "sum", "product", "difference", "quotient", "equation", "integer", "positive", "negative", "answer",
    "Let", "Then", "Therefore", "So the answer is", "step by step", "Please reason step by step, and put your final "
    "answer within \\boxed{}.", "We use Python to", "The result is", "number", "solution", "prime", "factor",
)


def base_corpus() -> list[str]:
    """The built-in corpus trained before the user's texts: Python keywords and builtins, code and math fragments."""
    words = list(keyword.kwlist) + list(_CODE_FRAGMENTS) + list(_MATH_WORDS)
    # Repeat each fragment in a few contexts so BPE sees it often enough to merge (min_frequency below).
    return [f"{w} {w}\n{w}({w})" for w in words] + [" ".join(words), "\n".join(words)]


def _split_out_specials(texts: Iterable[str], specials: list[str]) -> Iterator[str]:
    """Yield the pieces of each text between special tokens, so no merge is learned from their spellings."""
    pattern = re.compile("|".join(re.escape(s) for s in specials))
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"train_tokenizer: texts must be str, got {type(text).__name__}; pass an iterable of str")
        yield from (piece for piece in pattern.split(text) if piece)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, extra_special_tokens: Iterable[str] = (), chat_template: str = "chatml"
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``base_corpus() + texts`` and wrap it for ``transformers``.

    Args:
        texts: training text (e.g. rendered transcripts); special-token spellings inside it are cut out first.
        vocab_size: upper bound on the vocabulary, special tokens and the 256 byte symbols included; the result has
            fewer entries when the corpus has too few pairs worth merging (``len(tokenizer)`` is the truth).
        extra_special_tokens: more never-split tokens (e.g. ``"<tool_call>"``), given ids right after the base three.
        chat_template: a name of ``CHAT_TEMPLATES``.
    Returns:
        A ``PreTrainedTokenizerFast`` with eos ``<|im_end|>``, pad ``<|endoftext|>``, no bos prepended, and the
        chat template named (ChatML by default).
    """
    if chat_template not in CHAT_TEMPLATES:
        raise ValueError(f"train_tokenizer: chat_template={chat_template!r}; valid: {', '.join(CHAT_TEMPLATES)}")
    extras = [t for t in extra_special_tokens if t not in SPECIAL_TOKENS]
    specials = list(SPECIAL_TOKENS) + list(dict.fromkeys(extras))
    n_min = len(specials) + len(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size < n_min:
        raise ValueError(f"train_tokenizer: vocab_size={vocab_size} is below {n_min} (256 bytes + {len(specials)} "
                         f"special tokens); pass a larger vocab_size")
    tok = Tokenizer(models.BPE(unk_token=None))
    # No normalizer on purpose: normalization (e.g. NFC) would break exact round trips.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [*base_corpus(), *texts]
    tok.train_from_iterator(_split_out_specials(corpus, specials), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=EOS_TOKEN,
        additional_special_tokens=[IM_START, *extras],
        chat_template=CHAT_TEMPLATES[chat_template],
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
