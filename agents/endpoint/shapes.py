"""OpenAI-shaped answers of the policy endpoint: chat completions, completions, the model list and errors.

The shapes are OpenAI's (platform.openai.com/docs/api-reference), so the `openai` client parses them; the extra
fields are vLLM's, which RL stacks' agent loops read (verl, prime-rl, ART): `prompt_token_ids` beside `choices`
and `token_ids` in a choice when the request sets `return_token_ids`, a choice's `stop_reason` (the stop string
that ended it, or the id of the stop token: alprl's engines keep the token, so eos is named by its id too).
Token strings in `logprobs` are the decoded text of each id, or `token_id:<id>` with vLLM's
`return_tokens_as_token_ids`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase


@dataclass
class EndpointError(Exception):
    """A request the endpoint refuses, as OpenAI's error object, and what it means for the episode: `failure`
    names the infrastructure-failure reason its episode is marked with (agents/trajectory.py)."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str = "invalid_request_error"
    failure: str | None = "harness_error"

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Sampled:
    """What the engine produced for one call, and what the client is told of it."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    """OpenAI's: stop | length | tool_calls."""
    stop_reason: str | int | None
    text: str
    """The returned text: the sampled text less the stop string (unless `include_stop_str_in_output`) and the
    closing stop token."""


def token_strings(tokenizer: PreTrainedTokenizerBase, ids: list[int], as_ids: bool) -> list[str]:
    return [f"token_id:{i}" if as_ids else tokenizer.decode([i]) for i in ids]


def chat_logprobs(tokenizer: PreTrainedTokenizerBase, s: Sampled, as_ids: bool) -> dict[str, Any]:
    """`choices[i].logprobs` of a chat completion: one entry per sampled id, its sampled log-prob."""
    tokens = token_strings(tokenizer, s.token_ids, as_ids)
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                        for t, lp in zip(tokens, s.logprobs, strict=True)], "refusal": None}


def completion_logprobs(tokenizer: PreTrainedTokenizerBase, s: Sampled, as_ids: bool) -> dict[str, Any]:
    """`choices[i].logprobs` of a (legacy) completion."""
    tokens = token_strings(tokenizer, s.token_ids, as_ids)
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": tokens, "token_logprobs": list(s.logprobs), "top_logprobs": [{} for _ in tokens],
            "text_offset": offsets}


def _envelope(kind: str, call_id: str, model: str, s: Sampled, choice: dict[str, Any],
              return_ids: bool) -> dict[str, Any]:
    if return_ids:
        choice["token_ids"] = list(s.token_ids)
    choice |= {"index": 0, "finish_reason": s.finish_reason, "stop_reason": s.stop_reason}
    out = {"id": call_id, "object": kind, "created": int(time.time()), "model": model, "choices": [choice],
           "usage": {"prompt_tokens": len(s.prompt_ids), "completion_tokens": len(s.token_ids),
                     "total_tokens": len(s.prompt_ids) + len(s.token_ids)}}
    if return_ids:
        out["prompt_token_ids"] = list(s.prompt_ids)
    return out


def chat_response(call_id: str, model: str, s: Sampled, content: str | None, tool_calls: list[dict[str, Any]],
                  logprobs: dict[str, Any] | None, return_ids: bool) -> dict[str, Any]:
    message = {"role": "assistant", "content": content, "refusal": None,
               "tool_calls": tool_calls or None}
    return _envelope("chat.completion", call_id, model, s, {"message": message, "logprobs": logprobs}, return_ids)


def completion_response(call_id: str, model: str, s: Sampled, logprobs: dict[str, Any] | None,
                        return_ids: bool) -> dict[str, Any]:
    return _envelope("text_completion", call_id, model, s, {"text": s.text, "logprobs": logprobs}, return_ids)


def chat_chunks(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A finished chat completion as the chunks of a stream (`stream=true`): the message in one delta, then the
    finish reason, then usage; the sampling itself is not streamed. With `return_token_ids` the first chunk carries
    the sampled ids in its choice's `token_ids` and the prompt's in `prompt_token_ids`, as vLLM streams them."""
    choice = response["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message["content"] or ""}
    if message["tool_calls"]:
        delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
    head = {k: response[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    first = {"index": 0, "delta": delta, "logprobs": choice["logprobs"], "finish_reason": None}
    first_head = dict(head)
    if "token_ids" in choice:
        first["token_ids"] = choice["token_ids"]
        first_head["prompt_token_ids"] = response["prompt_token_ids"]
    last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
    return [first_head | {"choices": [first]}, head | {"choices": [last]},
            head | {"choices": [], "usage": response["usage"]}]


def model_list(model: str, max_model_len: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "alprl",
                                        "max_model_len": max_model_len}]}
