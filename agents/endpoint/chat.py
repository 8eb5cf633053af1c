"""A request → its prompt ids: messages rendered with the model's chat template, and the sampled ids of the
episode's earlier calls reused as sampled where the request repeats them.

Why reuse. A harness sends its whole history on every call. Rendering it again would re-encode the policy's earlier
turns from text (and a template may render an assistant message differently from how the policy wrote it: tool
calls as the template spells them, earlier `<think>` blocks dropped), so the next prompt would not extend the tokens
the policy sampled and every turn would start a new sample. Instead, when a request's messages start with an
earlier call's messages followed by the reply that call returned (its content, or its full text, and its tool calls,
compared as `(name, arguments)`; the same `tools`), its prompt ids are that call's prompt ids + its sampled ids + the ids of what
follows: the template's rendering of the later messages after the reply, read from one rendering in which the reply's
content is a mark, the reply's end-of-turn token dropped when the policy sampled it. That is what native rollouts
append (agents/control_tokens.py `tool_turn_ids`): the template's text with its control tokens, message contents
as text. A request with vLLM's `continue_final_message` (the last message an assistant prefix the model goes on
writing) continues the reply in the same message when that message starts with the reply's full sampled text (the
stop string included: vLLM's `include_stop_str_in_output`): the prompt is the earlier call's ids + the new text,
encoded as text, as a one-message TIR rollout appends a tool's output. Otherwise (the first call, or history the harness
edited) the messages are rendered whole (`chat_prompt_ids`); whether those ids extend the episode is the recorder's
question (agents/endpoint/recorder.py).

Legacy completions take a prompt of token ids as given; a text prompt that starts with an earlier text prompt +
its completion reuses that call's ids and encodes only the rest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from agents.control_tokens import chat_prompt_ids, encode_text, special_ids
from agents.endpoint.recorder import CallRecord
from agents.endpoint.shapes import EndpointError
from agents.endpoint.tool_calls import arguments_value, canonical_calls

ROLES = ("system", "developer", "user", "assistant", "tool")
_REPLY = "\x00alprl-reply\x00"  # a spelling no template and no tokenizer gives a meaning


@dataclass(frozen=True)
class Exchange:
    """What one call stands for in the client's terms, for later calls to recognize (module docstring)."""

    kind: str
    """chat | text."""
    base: tuple
    """chat: the canonical messages before the assistant message the call wrote into."""
    prefix: str | None
    """chat: the assistant content the call continued ("" for a new message); text: the prompt text (None for a
    prompt of ids)."""
    replies: tuple[str, ...]
    """The texts a client may carry the sampled turn as, in a message it closes: the returned content (tool calls
    apart), the returned text (the stop string apart), the full sampled text."""
    continuations: tuple[str, ...]
    """The texts a client must carry the sampled turn as to write on after it (the same message, a longer text
    prompt): the full sampled text, stop string included (decoded with and without control tokens)."""
    tool_calls: tuple
    """The canonical tool calls returned."""
    closed: bool
    """The sampled ids end with the template's end-of-turn token."""
    tools: str = "null"
    """chat: the request's tools (JSON), which the reused prompt was rendered with."""


def _bad_messages(message: str) -> EndpointError:
    return EndpointError(400, message, param="messages", code="invalid_messages")


def _text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise _bad_messages(f"messages[{i}].content must be a string or text parts; alprl's endpoint serves text only")


def canonical(messages: Any) -> tuple[dict[str, Any], ...]:
    """The request's messages in one form for comparing and rendering: role, content text, tool calls (canonical),
    tool_call_id and name where given. Raises a 400 for what cannot be a chat message."""
    if not isinstance(messages, list) or not messages:
        raise _bad_messages("'messages' must be a non-empty array")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _bad_messages(f"messages[{i}] must be an object with a role in {', '.join(ROLES)}")
        c = {"role": m["role"], "content": _text(m.get("content"), i),
             "tool_calls": tuple(canonical_calls(m.get("tool_calls"))) if m["role"] == "assistant" else ()}
        c |= {k: m[k] for k in ("tool_call_id", "name") if isinstance(m.get(k), str)}
        out.append(c)
    return tuple(out)


def template_message(m: dict[str, Any]) -> dict[str, Any]:
    """A canonical message as chat templates read it (`developer` as `system`, tool-call arguments as objects)."""
    out = {"role": "system" if m["role"] == "developer" else m["role"], "content": m["content"]}
    if m["tool_calls"]:
        out["tool_calls"] = [{"type": "function", "function": {"name": name, "arguments": arguments_value(args)}}
                             for name, args in m["tool_calls"]]
    return out | {k: m[k] for k in ("tool_call_id", "name") if k in m}


def _template(call, *args, **kwargs):
    """Run a template call; a template that refuses the conversation is the request's error (400)."""
    try:
        return call(*args, **kwargs)
    except Exception as err:  # jinja's TemplateError, raise_exception(...), a tokenizer's ValueError
        raise _bad_messages(f"the model's chat template refused the messages: {err}") from err


def render_chat(tok: PreTrainedTokenizerBase, messages: tuple, tools: list | None, continue_final: bool,
                add_generation_prompt: bool) -> list[int]:
    """The whole conversation's prompt ids, as the native rollout renders a first prompt (`chat_prompt_ids`); with
    `continue_final`, the messages before the last and a generation prompt, then the last one's content as text."""
    tm = [template_message(m) for m in messages]
    if continue_final:
        return _template(chat_prompt_ids, tok, tm[:-1], tools=tools) + encode_text(tok, tm[-1]["content"])
    if add_generation_prompt:
        return _template(chat_prompt_ids, tok, tm, tools=tools)
    return list(_template(tok.apply_chat_template, tm, tools=tools, add_generation_prompt=False, tokenize=True,
                          return_dict=False))


def _holds_control_text(tok: PreTrainedTokenizerBase, texts: list[str]) -> bool:
    spellings = [tok.convert_ids_to_tokens(i) for i in special_ids(tok)]
    return any(s and s in t for t in texts for s in spellings)


def _after_reply(tok: PreTrainedTokenizerBase, messages: tuple, n: int, tools: list | None, closed: bool,
                 end_text: str | None, continue_final: bool) -> list[int] | None:
    """Ids of what the template writes after the reply at `messages[n]` (module docstring); None when the template
    does not render the reply's content once or does not close it with the end-of-turn token it sampled."""
    later = list(messages[n + 1:])
    tail = later.pop()["content"] if continue_final else None
    contents = [m["content"] for m in later]
    plain = not _holds_control_text(tok, contents)
    marks = contents if plain else [f"\x00alprl-{k}\x00" for k in range(len(later))]
    conv = ([template_message(m) for m in messages[:n]] + [{"role": "assistant", "content": _REPLY}]
            + [template_message(m) | {"content": mark} for m, mark in zip(later, marks, strict=True)])
    rendered = _template(tok.apply_chat_template, conv, tools=tools, add_generation_prompt=True, tokenize=False)
    if not isinstance(rendered, str) or rendered.count(_REPLY) != 1:
        return None
    after = rendered.split(_REPLY, 1)[1]
    if closed:
        if not end_text or not after.startswith(end_text):
            return None
        after = after[len(end_text):]
    if plain:  # the ids the whole rendering's encoding gives, as the native tool turn's
        ids = list(tok.encode(after, add_special_tokens=False))
    else:  # template text with its control tokens, each content as text
        ids = []
        for mark, content in zip(marks, contents, strict=True):
            part, after = after.split(mark, 1)
            ids += tok.encode(part, add_special_tokens=False) + encode_text(tok, content)
        ids += tok.encode(after, add_special_tokens=False)
    return ids + (encode_text(tok, tail) if continue_final else [])


def _reuse(tok: PreTrainedTokenizerBase, call: CallRecord, messages: tuple, tools: list | None, continue_final: bool,
           end_text: str | None) -> list[int] | None:
    """The prompt ids of `messages` on top of `call`'s sampled ids, or None when they do not repeat it."""
    ex: Exchange = call.exchange
    n = len(ex.base)
    if len(messages) <= n or messages[:n] != ex.base or messages[n]["role"] != "assistant" \
            or json.dumps(tools, sort_keys=True) != ex.tools:
        return None
    reply, head = messages[n], call.prompt_ids + call.completion_ids
    if reply["tool_calls"] and reply["tool_calls"] != ex.tool_calls:
        return None
    if continue_final and len(messages) == n + 1:  # the same assistant message, written on
        if reply["tool_calls"] or ex.closed:
            return None
        for r in ex.continuations:
            if reply["content"].startswith(ex.prefix + r):
                return head + encode_text(tok, reply["content"][len(ex.prefix + r):])
        return None
    if reply["content"] not in {ex.prefix + r for r in ex.replies}:
        return None
    after = _after_reply(tok, messages, n, tools, ex.closed, end_text, continue_final)
    return None if after is None else head + after


def chat_prompt(tok: PreTrainedTokenizerBase, messages: tuple, tools: list | None, continue_final: bool,
                add_generation_prompt: bool, calls: list[CallRecord], end_text: str | None) -> list[int]:
    """The prompt ids of a chat request in an episode whose calls so far are `calls` (module docstring)."""
    if continue_final and messages[-1]["role"] != "assistant":
        raise EndpointError(400, "continue_final_message needs the last message to be an assistant message",
                            param="messages", code="invalid_messages")
    for call in reversed(calls):
        if isinstance(call.exchange, Exchange) and call.exchange.kind == "chat":
            ids = _reuse(tok, call, messages, tools, continue_final, end_text)
            if ids is not None:
                return ids
    return render_chat(tok, messages, tools, continue_final, add_generation_prompt)


def text_prompt(tok: PreTrainedTokenizerBase, prompt: str | list[int], calls: list[CallRecord]) -> list[int]:
    """The prompt ids of a legacy completion: ids as given; text on top of an earlier text call it starts with."""
    if not isinstance(prompt, str):
        return list(prompt)
    for call in reversed(calls):
        ex = call.exchange
        if isinstance(ex, Exchange) and ex.kind == "text" and ex.prefix is not None:
            for r in ex.continuations:
                if prompt.startswith(ex.prefix + r):
                    rest = prompt[len(ex.prefix + r):]
                    return call.prompt_ids + call.completion_ids + list(tok.encode(rest, add_special_tokens=False))
    return list(tok.encode(prompt))


def chat_exchange(messages: tuple, tools: list | None, continue_final: bool, replies: tuple[str, ...], full: str,
                  calls: list, closed: bool) -> Exchange:
    """The `Exchange` of a chat call that returned `replies` (content, text) of the sampled `full` text and the tool
    calls `calls` [(name, args)]."""
    base = messages[:-1] if continue_final else messages
    prefix = messages[-1]["content"] if continue_final else ""
    canonical_reply = tuple(canonical_calls([{"function": {"name": n, "arguments": a}} for n, a in calls]))
    return Exchange("chat", base, prefix, replies=tuple(dict.fromkeys((*replies, full))), continuations=(full,),
                    tool_calls=canonical_reply, closed=closed, tools=json.dumps(tools, sort_keys=True))


def text_exchange(prompt: str | list[int], full: tuple[str, ...], closed: bool) -> Exchange:
    """The `Exchange` of a legacy completion whose sampled text is `full` (without and with control tokens)."""
    return Exchange("text", (), prompt if isinstance(prompt, str) else None, replies=(),
                    continuations=tuple(sorted(set(full), key=len, reverse=True)), tool_calls=(), closed=closed)
