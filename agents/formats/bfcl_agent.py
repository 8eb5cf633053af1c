"""The BFCL agent (`alprl/BFCL-v0`): a function-calling chat, rendered by the model's own chat template, token in and
token out.

The env (with `observation="messages"`) hands over each observation as chat messages: the first user turn, the
results of a turn's calls as `tool` messages, the next user turn. The prompt is the template's rendering of the first
user turn with the episode's tools (`tools=`, as BFCL's function-calling handlers send them); a template that does
not render tools gets them in a system message, as BFCL's prompting mode lists them. Every assistant turn ends at the
template's end-of-turn token, and the env steps it (`RunToolCall`): its hermes `<tool_call>` blocks run on BFCL's
simulators, and a turn without one ends the user turn. What follows a turn is the template's text after it for the
new messages, through the next generation prompt (`control_tokens.continuation_ids`), never a re-encoding of the
sampled ids. miss_func's added functions arrive in a user message (the env lists them there), so the prompt only
grows: one trace an episode.
"""

from __future__ import annotations

import json
from typing import Any

from transformers import PreTrainedTokenizerBase

from agents.control_tokens import (
    chat_prompt_ids,
    continuation_ids,
    encode_text,
    end_of_turn_ids,
    renders_tools,
    template_end_of_turn_id,
)
from agents.rollout import RunToolCall

BFCL_SYSTEM_PROMPT = ("You are an expert in composing functions. Call functions as <tool_call>{\"name\": ..., "
                      "\"arguments\": {...}}</tool_call>, one block per call; reply without a call when the "
                      "user's request is done or cannot be done with the functions.")
"""For a chat template that does not render `tools=`: BFCL's system prompt in short, in the hermes format, with the
functions listed after it."""


class BFCLAgent:
    format_version = 1
    """Bump when the prompt or observation text changes: SFT caches built with another version are rebuilt."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer

    def opening(self, first_obs: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        """(the opening messages, the entry's tools, whether the template renders them) from the env's first
        observation `{"tools": ..., "messages": ...}`; where it does not, the messages open with a system message
        listing them."""
        first = json.loads(first_obs)
        opening, tools = first["messages"], first["tools"]
        if renders_tools(self.tokenizer, tools):
            return opening, tools, True
        system = BFCL_SYSTEM_PROMPT + "\nFunctions:\n" + json.dumps(tools)
        return [{"role": "system", "content": system}, *opening], tools, False

    def messages(self, first_obs: str) -> list[dict[str, Any]]:
        """The opening messages (`opening`)."""
        return self.opening(first_obs)[0]

    def prompt_ids(self, first_obs: str, info: dict[str, Any]) -> list[int]:
        messages, tools, rendered = self.opening(first_obs)
        return chat_prompt_ids(self.tokenizer, messages, tools=tools if rendered else None)

    def observation_ids(self, obs: str) -> list[int]:
        """The template's text after the turn for the observation's messages; plain text where it renders none."""
        messages = json.loads(obs)
        ids = continuation_ids(self.tokenizer, messages)
        return ids if ids is not None else encode_text(self.tokenizer, "\n".join(m["content"] for m in messages))

    def stop_strings(self, num_tool_calls: int) -> list[str]:
        """None: a turn ends at the template's end-of-turn token."""
        return []

    def end_of_turn_ids(self) -> list[int]:
        return end_of_turn_ids(self.tokenizer)

    def ended_turn_action(self, text: str) -> RunToolCall:
        """Every turn ends at its end-of-turn token and the env steps it: calls run, a reply without one ends the
        user turn, and the env says when the episode is over."""
        return RunToolCall(text)

    def turn_ids(self, text: str) -> list[int]:
        """Token ids of an expert-written turn (SFT data), ending at the end-of-turn token as the policy writes it."""
        end = template_end_of_turn_id(self.tokenizer)
        return self.tokenizer.encode(text, add_special_tokens=False) + ([end] if end is not None else [])

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)
