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

**Tool turns.** A template that renders a `tool` message gives a tool result a turn of its own: Qwen2.5 closes the
assistant turn at `<|im_end|>`, then writes `\\n<|im_start|>user\\n<tool_response>\\n{result}\\n</tool_response>`,
`<|im_end|>\\n` and the next generation prompt `<|im_start|>assistant\\n`. `tool_turn_template` reads that text (what
the template writes after the assistant's end-of-turn token) from one rendering with marked contents;
`tool_turn_ids` encodes it around a result, the result as text. Appended after a turn the policy ended at its
end-of-turn token, it leaves the transcript holding the ids `apply_chat_template` gives the whole conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

_MARK = "\x00alprl-content\x00"  # a spelling no template and no tokenizer gives a meaning
_TOOL_MARK = "\x00alprl-tool\x00"


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


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]],
                    tools: list[dict] | None = None) -> list[int]:
    """`apply_chat_template(messages, tools=tools, add_generation_prompt=True)` as token ids, with any special-token
    spelling inside a message's content encoded as text. Contents without one (the usual case) take the plain path,
    so their ids are exactly the template's."""
    if not _holds_control_text(tokenizer, (m["content"] for m in messages)):
        return list(tokenizer.apply_chat_template(list(messages), tools=tools, add_generation_prompt=True,
                                                  tokenize=True, return_dict=False))
    marks = [f"\x00alprl-{i}\x00" for i in range(len(messages))]
    rendered = tokenizer.apply_chat_template([{**m, "content": mark} for m, mark in zip(messages, marks, strict=True)],
                                             tools=tools, add_generation_prompt=True, tokenize=False)
    ids: list[int] = []
    for message, mark in zip(messages, marks, strict=True):
        template_part, rendered = rendered.split(mark, 1)
        ids += tokenizer.encode(template_part, add_special_tokens=False) + encode_text(tokenizer, message["content"])
    return ids + tokenizer.encode(rendered, add_special_tokens=False)


def renders_tools(tokenizer: PreTrainedTokenizerBase, tools: list[dict]) -> bool:
    """Whether the chat template writes `tools` (function schemas) into the prompt, as Qwen2.5's `# Tools` system
    section does: the rendering with them holds each function's name and description, the one without does not."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    conversation = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    try:
        with_tools = tokenizer.apply_chat_template(conversation, tools=tools, tokenize=False)
        without = tokenizer.apply_chat_template(conversation, tokenize=False)
    except Exception:  # a template that refuses `tools` does not render them
        return False
    texts = [t for tool in tools for t in (tool["function"]["name"], tool["function"].get("description", ""))]
    return all(t in with_tools and t not in without for t in texts if t)


def tool_turn_template(tokenizer: PreTrainedTokenizerBase) -> tuple[str, str] | None:
    """(before, after): the template's text around a `tool` message's content, from right after the assistant
    turn's end-of-turn token through the next generation prompt (Qwen2.5: "\\n<|im_start|>user\\n<tool_response>
    \\n", "\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n"). None without a template, when it refuses a
    `tool` message or drops its content, or when no end-of-turn token closes the assistant's content."""
    turn_end = template_end_of_turn_id(tokenizer)
    if turn_end is None:
        return None
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK},
                    {"role": "tool", "content": _TOOL_MARK}]
    try:
        rendered = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    except Exception:  # e.g. a template that wants a tool_call_id: no tool turn we can read
        return None
    if not isinstance(rendered, str) or rendered.count(_MARK) != 1 or rendered.count(_TOOL_MARK) != 1:
        return None
    after = rendered.split(_MARK, 1)[1]
    end = tokenizer.convert_ids_to_tokens(turn_end)
    if not after.startswith(end) or _TOOL_MARK not in after:
        return None
    before, rest = after[len(end):].split(_TOOL_MARK, 1)
    return before, rest


def continuation_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, Any]]) -> list[int] | None:
    """Token ids of what the chat template writes after an assistant turn's end-of-turn token for `messages` (tool
    results, a next user message) through the next generation prompt: the template's own ids where no content holds
    a special-token spelling, else each content encoded as text; None when the template cannot render them after
    an assistant turn (no template, no end-of-turn token, a refusal)."""
    turn_end = template_end_of_turn_id(tokenizer)
    if turn_end is None or not messages:
        return None
    marks = [f"\x00alprl-{i}\x00" for i in range(len(messages))]
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK},
                    *({**m, "content": mark} for m, mark in zip(messages, marks, strict=True))]
    try:
        rendered = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    except Exception:  # a template that refuses these roles
        return None
    end = tokenizer.convert_ids_to_tokens(turn_end)
    after = rendered.split(_MARK, 1)[1] if isinstance(rendered, str) and rendered.count(_MARK) == 1 else ""
    if not after.startswith(end) or not all(after.count(mark) == 1 for mark in marks):
        return None
    rest, ids = after[len(end):], []
    if not _holds_control_text(tokenizer, (m["content"] for m in messages)):  # the plain path: the template's ids
        for message, mark in zip(messages, marks, strict=True):  # (the span starts after a control token, so it
            rest = rest.replace(mark, message["content"], 1)  # is encoded on its own in the whole rendering too)
        return list(tokenizer.encode(rest, add_special_tokens=False))
    for message, mark in zip(messages, marks, strict=True):
        template_part, rest = rest.split(mark, 1)
        ids += tokenizer.encode(template_part, add_special_tokens=False) + encode_text(tokenizer, message["content"])
    return ids + tokenizer.encode(rest, add_special_tokens=False)


def tool_turn_ids(tokenizer: PreTrainedTokenizerBase, template: tuple[str, str], content: str) -> list[int]:
    """Token ids of a tool turn (`template` from `tool_turn_template`) holding `content`: the template's text with
    its control tokens, the content as text. Content without a special-token spelling takes the plain path, the
    ids `apply_chat_template` gives for the whole conversation (the turn starts after a control token, so its text
    is encoded on its own there too)."""
    before, after = template
    if not _holds_control_text(tokenizer, [content]):
        return list(tokenizer.encode(before + content + after, add_special_tokens=False))
    return (tokenizer.encode(before, add_special_tokens=False) + encode_text(tokenizer, content)
            + tokenizer.encode(after, add_special_tokens=False))
