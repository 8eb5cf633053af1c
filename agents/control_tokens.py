"""A chat tokenizer's control tokens: which ids end a turn, and how environment text stays text.

**End of turn.** A checkpoint's eos is not always the token its chat template closes a turn with: Qwen2.5's base
checkpoints declare eos `<|endoftext|>` while their template (and what the policy learns to write) closes every
turn with `<|im_end|>`. An engine that stops on eos alone samples past `<|im_end|>` with loss mask 1 until the
turn budget runs out. `end_of_turn_ids` returns eos plus the template's end-of-turn token, found by rendering a
one-exchange conversation and reading the control token that follows the assistant's content; the rollout puts
them (and `rollout.stop_token_ids`) on every request, so both engines stop on the same ids.

**Environment text is text.** `tokenizer.encode` turns the spelling of a special token into its control id, so a
program that prints `<|im_end|>` would close the assistant turn inside an observation, and a problem statement
holding `<|im_start|>` would open a fake one. `encode_text` encodes such spellings as the plain characters they
are; `chat_prompt_ids` does the same for message contents while the template's own control tokens keep their ids.
Plain added tokens (Qwen2.5's `<tool_call>`, Qwen3's `<tool_response>`, `<think>`) are not control tokens: the
tokenizer maps their spelling to their id in any text, as the model's own chat template does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from transformers import PreTrainedTokenizerBase

_MARK = "\x00alprl-content\x00"  # a spelling no template and no tokenizer gives a meaning


def special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids of the tokenizer's special (control) tokens."""
    return set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}


def _eos_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    eos = tokenizer.eos_token_id
    return [] if eos is None else [int(eos)]


def template_end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The control token the chat template writes right after an assistant message's content (`<|im_end|>` in
    ChatML); None without a template, or when the template follows the content with plain text."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK}]
    try:
        rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
    except Exception:  # a template that refuses this conversation has no end-of-turn token we can read
        return None
    if not isinstance(rendered, str) or _MARK not in rendered:
        return None
    after = rendered.split(_MARK, 1)[1]
    ids = tokenizer.encode(after, add_special_tokens=False)
    return ids[0] if ids and ids[0] in special_ids(tokenizer) else None


def end_of_turn_ids(tokenizer: PreTrainedTokenizerBase, extra: Iterable[int] = ()) -> list[int]:
    """Token ids that end an assistant turn: eos, the template's end-of-turn token, then `extra`; no repeats."""
    turn_end = template_end_of_turn_id(tokenizer)
    ids = [*_eos_ids(tokenizer), *([] if turn_end is None else [turn_end]), *(int(i) for i in extra)]
    return list(dict.fromkeys(ids))


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of environment text, the spellings of special tokens encoded as plain characters."""
    return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))


def _holds_control_text(tokenizer: PreTrainedTokenizerBase, texts: Iterable[str]) -> bool:
    spellings = [tokenizer.convert_ids_to_tokens(i) for i in special_ids(tokenizer)]
    return any(s and s in text for text in texts for s in spellings)


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]) -> list[int]:
    """`apply_chat_template(messages, add_generation_prompt=True)` as token ids, with any special-token spelling
    inside a message's content encoded as text. Contents without one (the usual case) take the plain path, so
    their ids are exactly the template's."""
    if not _holds_control_text(tokenizer, (m["content"] for m in messages)):
        return list(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True,
                                                  return_dict=False))
    marks = [f"\x00alprl-{i}\x00" for i in range(len(messages))]
    rendered = tokenizer.apply_chat_template([{**m, "content": mark} for m, mark in zip(messages, marks, strict=True)],
                                             add_generation_prompt=True, tokenize=False)
    ids: list[int] = []
    for message, mark in zip(messages, marks, strict=True):
        template_part, rendered = rendered.split(mark, 1)
        ids += tokenizer.encode(template_part, add_special_tokens=False) + encode_text(tokenizer, message["content"])
    return ids + tokenizer.encode(rendered, add_special_tokens=False)
