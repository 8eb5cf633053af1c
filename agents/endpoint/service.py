"""One call of the policy endpoint, start to end: which episode it belongs to, its prompt ids, its budget, the
sampling, the record and the OpenAI-shaped answer. The routes (agents/endpoint/app.py) only parse and serialize.

- **Episode**: the `X-Episode-Id` header, else the `user` field when it names a known episode, else the API key
  (the harness source hands each episode its own key, so a harness that never names its episode is still recorded).
  A call of no known episode is refused (400): an unrecorded sample would be lost to training.
- **Seeds**: call c of the episode at position i of a batch seeded s samples with `episode_seed(s, i, c)`, the seed
  the native rollout gives episode i's turn c (agents/rollout.py), so a harness that replays alprl's agent loop
  samples the native rollout's tokens.
- **Budget**: a call samples at most `min(max_tokens, rollout.max_new_tokens)` tokens and never past the sample's
  response budget (`rollout.max_response_tokens`, prompt extension included), as a native turn; a call with no room
  left samples nothing (finish reason "length") and the episode is marked truncated.
- **Sampling settings are the run's**: the engine samples at `rollout.temperature` / `top_p` / `top_k`, the
  distribution the trainer's log-probs replay, so a request asking for another temperature, penalties, a logit
  bias, `n` > 1 or a response format is refused (400) rather than silently sampled otherwise; a request's `seed` is
  ignored (the seed is the episode's, above).
- **Errors**: a refused request answers OpenAI's error object (agents/endpoint/shapes.py) and marks its episode:
  `context_overflow` for a prompt the engine's context cannot hold (400 `context_length_exceeded`), `engine_error`
  for a request the engine failed (500; 503 when it died, which also ends the run as natively), `harness_error`
  for any other refusal (unknown model 404, malformed tools
  or messages 400). The episode is still returned to the trainer, out of the loss (agents/trajectory.py).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

from agents.control_tokens import end_of_turn_ids, template_end_of_turn_id
from agents.endpoint.chat import canonical, chat_exchange, chat_prompt, text_exchange, text_prompt
from agents.endpoint.recorder import CallRecord, EpisodeLog, Recorder
from agents.endpoint.sampler import Sampler
from agents.endpoint.shapes import (
    EndpointError,
    Sampled,
    chat_logprobs,
    chat_response,
    completion_logprobs,
    completion_response,
)
from agents.endpoint.tool_calls import check_tools, openai_tool_calls, parse_tool_calls
from agents.engines.base import EngineDied, GenerationRequest
from agents.rollout import episode_seed


@dataclass
class EndpointSettings:
    """What the endpoint serves and how (the harness source fills it from the run config)."""

    max_new_tokens: int
    """Most tokens one call samples (`rollout.max_new_tokens`)."""
    max_response_tokens: int
    """A sample's response budget, extensions included (`rollout.max_response_tokens`)."""
    model_name: str = "alprl-policy"
    stop_token_ids: list[int] = field(default_factory=list)
    """Ids that end a turn besides eos and the template's end-of-turn token (`rollout.stop_token_ids`)."""
    tool_format: str = "hermes"
    """How tool calls are written in a sampled turn (agents/endpoint/tool_calls.py): the run's `env.style`."""
    seed: int | None = None
    """The batch's sampling seed (None: each call unseeded)."""
    first_index: int = 0
    """Position of this endpoint's first episode in the step's batch (data-parallel ranks), as in `run_episodes`."""
    temperature: float = field(kw_only=True)
    """The engine's sampling settings (`rollout.temperature`, `top_p`, `top_k`; without defaults here, the run
    config states them once): a request may only repeat them."""
    top_p: float = field(kw_only=True)
    top_k: int = field(kw_only=True)


def _refuse(param: str, message: str) -> EndpointError:
    return EndpointError(400, message, param=param, code="unsupported_parameter")


class PolicyService:
    """Serves the calls of the episodes in `recorder` from `sampler`'s engine (module docstring)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, sampler: Sampler, recorder: Recorder,
                 settings: EndpointSettings, max_model_len: int):
        self.tok, self.sampler, self.recorder, self.s = tokenizer, sampler, recorder, settings
        self.max_model_len = max_model_len
        end_id = template_end_of_turn_id(tokenizer)
        self.end_id = end_id
        self.end_text = None if end_id is None else tokenizer.convert_ids_to_tokens(end_id)
        self.stop_ids = end_of_turn_ids(tokenizer, settings.stop_token_ids)
        self.engine_died: EngineDied | None = None
        """Set when the engine died under a call (every later call fails too)."""

    # ------------------------------------------------------------------ checks

    def episode(self, body: dict[str, Any], header: str | None, api_key: str | None) -> EpisodeLog:
        """The call's episode (module docstring); a 400 naming the ways to send one when there is none."""
        if header:
            ep = self.recorder.get(header)
            if ep is None:
                raise EndpointError(400, f"unknown episode id {header!r} (X-Episode-Id)", param="X-Episode-Id",
                                    code="unknown_episode", failure=None)
            return ep
        for value in (body.get("user"), api_key):
            if isinstance(value, str) and value and (ep := self.recorder.get(value)) is not None:
                return ep
        raise EndpointError(400, "no episode: send the episode id as the X-Episode-Id header or the `user` field, "
                                 "or use the API key the harness was given", param="user", code="missing_episode",
                            failure=None)

    def check_request(self, body: dict[str, Any]) -> None:
        """The model name and the sampling settings (module docstring)."""
        if body.get("model") != self.s.model_name:
            raise EndpointError(404, f"The model `{body.get('model')}` does not exist; this endpoint serves "
                                     f"`{self.s.model_name}`", param="model", code="model_not_found")
        for key, run_value in (("temperature", self.s.temperature), ("top_p", self.s.top_p)):
            value = body.get(key)
            if value is not None and not (isinstance(value, int | float) and math.isclose(value, run_value,
                                                                                          rel_tol=1e-6)):
                raise _refuse(key, f"{key}={body[key]}: the policy samples at the run's {key}={run_value} "
                                   f"(rollout.{key}), which the trainer's log-probs assume; omit it or pass {run_value}")
        top_k = body.get("top_k")  # vLLM's extra parameter; -1 (vLLM's "every token") is alprl's 0
        if top_k is not None and top_k != self.s.top_k and not (top_k == -1 and self.s.top_k == 0):
            raise _refuse("top_k", f"top_k={top_k}: the policy samples at rollout.top_k={self.s.top_k}")
        for key in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
            if body.get(key) not in (None, 0, 0.0) and not (key == "repetition_penalty" and body[key] == 1):
                raise _refuse(key, f"{key} would change the sampling distribution the trainer replays")
        if body.get("logit_bias"):
            raise _refuse("logit_bias", "logit_bias would change the sampling distribution the trainer replays")
        if body.get("n") not in (None, 1):
            raise _refuse("n", "n must be 1: each call is one sample of its episode")
        fmt = body.get("response_format")
        if fmt not in (None, {"type": "text"}):
            raise _refuse("response_format", "only text responses are served (no constrained decoding)")

    def check_context(self, prompt_ids: list[int]) -> None:
        if len(prompt_ids) >= self.max_model_len:
            raise EndpointError(400, f"This model's maximum context length is {self.max_model_len} tokens; the "
                                     f"prompt has {len(prompt_ids)}", param="messages",
                                code="context_length_exceeded", failure="context_overflow")

    @staticmethod
    def _stop(body: dict[str, Any]) -> list[str]:
        stop = body.get("stop")
        stop = [stop] if isinstance(stop, str) else (stop or [])
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise _refuse("stop", "stop must be a string or an array of non-empty strings")
        return stop

    def _budget(self, body: dict[str, Any], room: int) -> int:
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if asked is not None and (not isinstance(asked, int) or asked < 1):
            raise _refuse("max_tokens", "max_tokens must be a positive integer")
        return min(asked or self.s.max_new_tokens, self.s.max_new_tokens, room)

    # ------------------------------------------------------------------ sampling

    async def sample(self, ep: EpisodeLog, prompt_ids: list[int], body: dict[str, Any]) -> tuple[int, Sampled]:
        """(call number, what was sampled) for one call; nothing is sampled where the sample's budget is spent."""
        stop = self._stop(body)
        budget = self._budget(body, self.recorder.room(ep, prompt_ids))
        index = self.recorder.take_call_index(ep)
        if budget <= 0:
            return index, Sampled(prompt_ids, [], [], "length", None, "")
        seed = (random.getrandbits(63) if self.s.seed is None
                else episode_seed(self.s.seed, self.s.first_index + ep.index, index))
        request = GenerationRequest(prompt_ids, budget, stop, list(self.stop_ids))
        try:
            result = await asyncio.wrap_future(self.sampler.submit(request, seed))
        except EngineDied as err:  # the run cannot go on: the harness source raises it once the batch has ended
            self.engine_died = err
            raise EndpointError(503, f"the engine died: {err}", type="server_error", code="engine_died",
                                failure="engine_error") from err
        except Exception as err:
            raise EndpointError(500, f"the engine failed the request: {type(err).__name__}: {err}",
                                type="server_error", code="engine_error", failure="engine_error") from err
        return index, self._described(prompt_ids, result.token_ids, result.logprobs, result.finish_reason, stop,
                                      bool(body.get("include_stop_str_in_output")))

    def _described(self, prompt_ids: list[int], ids: list[int], logprobs: list[float], finish: str,
                   stop: list[str], include_stop: bool) -> Sampled:
        full = self.tok.decode(ids, skip_special_tokens=True)
        if finish == "eos":
            return Sampled(prompt_ids, ids, logprobs, "stop", ids[-1], self.tok.decode(ids[:-1],
                                                                                      skip_special_tokens=True))
        if finish == "stop":
            at, matched = max((full.rfind(s), s) for s in stop) if stop else (-1, None)
            text = full if include_stop or at < 0 else full[:at]
            return Sampled(prompt_ids, ids, logprobs, "stop", matched, text)
        return Sampled(prompt_ids, ids, logprobs, "length", None, full)

    # ------------------------------------------------------------------ the two routes

    async def chat(self, body: dict[str, Any], header: str | None, api_key: str | None) -> dict[str, Any]:
        ep = self.episode(body, header, api_key)
        with self._marking(ep):
            self.check_request(body)
            messages, tools = canonical(body.get("messages")), check_tools(body.get("tools"))
            continue_final = bool(body.get("continue_final_message"))
            with ep.lock:
                calls = list(ep.calls)
            prompt_ids = chat_prompt(self.tok, messages, tools, continue_final,
                                     body.get("add_generation_prompt", True) is not False, calls, self.end_text)
            self.check_context(prompt_ids)
            index, s = await self.sample(ep, prompt_ids, body)
            parse = tools if body.get("tool_choice") != "none" else None
            content, calls_out = parse_tool_calls(s.text, self.s.tool_format, parse)
            if calls_out:
                s.finish_reason = "tool_calls" if s.finish_reason != "length" else "length"
            full = self.tok.decode(s.token_ids, skip_special_tokens=True)
            closed = bool(s.token_ids) and s.token_ids[-1] == self.end_id
            exchange = chat_exchange(messages, tools, continue_final, (content, s.text), full, calls_out, closed)
            self.recorder.record(ep, CallRecord(index, prompt_ids, s.token_ids, s.logprobs, s.finish_reason,
                                                exchange, version=self.sampler.version))
            logprobs = chat_logprobs(self.tok, s, bool(body.get("return_tokens_as_token_ids"))) \
                if body.get("logprobs") else None
            return chat_response(f"chatcmpl-{ep.episode_id}-{index}", self.s.model_name, s,
                                 content if (content or not calls_out) else None, openai_tool_calls(calls_out, index),
                                 logprobs, bool(body.get("return_token_ids")))

    async def complete(self, body: dict[str, Any], header: str | None, api_key: str | None) -> dict[str, Any]:
        ep = self.episode(body, header, api_key)
        with self._marking(ep):
            self.check_request(body)
            if body.get("stream"):
                raise _refuse("stream", "stream=true is served on /v1/chat/completions only")
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
                prompt = prompt[0]
            if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                                and all(isinstance(i, int) for i in prompt))):
                raise _refuse("prompt", "prompt must be one string or one array of token ids")
            with ep.lock:
                calls = list(ep.calls)
            prompt_ids = text_prompt(self.tok, prompt, calls)
            self.check_context(prompt_ids)
            index, s = await self.sample(ep, prompt_ids, body)
            full = (self.tok.decode(s.token_ids, skip_special_tokens=True),
                    self.tok.decode(s.token_ids, skip_special_tokens=False))
            closed = bool(s.token_ids) and s.token_ids[-1] == self.end_id
            self.recorder.record(ep, CallRecord(index, prompt_ids, s.token_ids, s.logprobs, s.finish_reason,
                                                text_exchange(prompt, full, closed), version=self.sampler.version))
            logprobs = completion_logprobs(self.tok, s, bool(body.get("return_tokens_as_token_ids"))) \
                if body.get("logprobs") is not None else None
            return completion_response(f"cmpl-{ep.episode_id}-{index}", self.s.model_name, s, logprobs,
                                       bool(body.get("return_token_ids")))

    @contextmanager
    def _marking(self, ep: EpisodeLog) -> Iterator[None]:
        """A refusal inside marks `ep` with its failure reason before it answers the client."""
        try:
            yield
        except EndpointError as err:
            if err.failure:
                self.recorder.mark(ep, err.failure, err.message)
            raise
        except Exception as err:  # the endpoint's own failure: the client gets a 500, the episode its mark
            message = f"the endpoint failed the request: {type(err).__name__}: {err}"
            self.recorder.mark(ep, "harness_error", message)
            raise EndpointError(500, message, type="server_error", code="internal_error") from err
