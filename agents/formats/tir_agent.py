"""TIR agent formatting: chat prompt, observation tokens, stop strings of the chosen style; and the single-turn
math agent (`alprl/Math-v0`), the same chat format without the tool.

The whole episode is ONE assistant message: turns and code-execution results are concatenated
(SimpleTIR-style), so observations are appended as plain tokens and the model continues after them.

The exception is a function-calling style (hermes) under a chat template that renders `tool` messages
(`agents.control_tokens.tool_turn_template`; Qwen2.5's, Qwen3's and alprl's tiny ChatML do): there each tool call is
an assistant turn of its own, as the template writes one. No stop string: the policy ends the turn at the
template's end-of-turn token, a turn that ended there holding a tool call runs it (`RunToolCall`), and the
observation is the template's tool turn plus the next generation prompt, masked, never re-encoding sampled ids; a
turn that ended there without one ends the episode, graded. The system prompt leaves the tool to the template
when the template renders `tools=`. Without such a template hermes keeps the one-message format.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from agents.control_tokens import (
    chat_prompt_ids,
    encode_text,
    end_of_turn_ids,
    renders_tools,
    template_end_of_turn_id,
    tool_turn_ids,
    tool_turn_template,
)
from agents.rollout import RunToolCall
from envs.tir.styles import SINGLE_TURN_SYSTEM_PROMPT, get_style
from envs.tir_defaults import DEFAULT_STYLE


class TIRAgent:
    format_version = 2  # 2: hermes tool calls end their turn and come back as the template's tool turn
    """Bump when the prompt or observation text changes: SFT caches built with another version are rebuilt."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, style: str = DEFAULT_STYLE):
        self.tokenizer = tokenizer
        self.style = get_style(style)
        schema = self.style.tool_schema
        self.tool_turn = None if schema is None else tool_turn_template(tokenizer)
        """The template's text around a tool result (None: the one-message format)."""
        self.tools = [schema] if self.tool_turn is not None and renders_tools(tokenizer, [schema]) else None
        """`tools=` for the chat template, when it lists them itself."""

    def messages(self, question: str) -> list[dict[str, str]]:
        system = self.style.template_system_prompt if self.tools else self.style.system_prompt
        return [{"role": "system", "content": system}, {"role": "user", "content": question}]

    def stop_strings(self, num_tool_calls: int) -> list[str]:
        """The style's stop strings; none once its tool-call budget is spent (ToRL's last round), nor where turns
        end at the template's end-of-turn token (tool turns)."""
        return [] if self.tool_turn is not None else list(self.style.stop_for(num_tool_calls))

    def end_of_turn_ids(self) -> list[int]:
        """eos and the chat template's end-of-turn token: the whole episode is one assistant message, so either
        ends the episode (agents/rollout.py), except a tool call's turn under a template's tool turns."""
        return end_of_turn_ids(self.tokenizer)

    def ended_turn_action(self, text: str) -> str | RunToolCall | None:
        """The action for a turn that closed the message: the turn itself when it answers or is void (the env
        grades it and runs nothing); None when it would run a tool call, which a closed message never does; with
        tool turns, a `RunToolCall`: ending the turn is how the template makes the call."""
        parsed = self.style.parse_turn(text)
        if parsed.answered or parsed.code is None:
            return text
        return RunToolCall(text) if self.tool_turn is not None else None

    def prompt_ids(self, first_obs: str, info: dict[str, Any]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, self.messages(first_obs), tools=self.tools)

    def render_prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The chat template's prompt for the next turn of a conversation (opening messages, assistant turns, tool
        results) with the agent's tools: `env.think_history=strip`'s next prompt (agents/templates/history.py)."""
        return chat_prompt_ids(self.tokenizer, messages, tools=self.tools)

    def shown_tool_content(self, obs: str, cap: int) -> str:
        """The tool message's content as the model was shown it, within `cap` tokens (`capped_observation_ids`)."""
        content = self.style.tool_message(obs)
        return self.tokenizer.decode(self._capped_content_ids(obs, cap) or [], skip_special_tokens=False) \
            if len(self.observation_ids(obs)) > cap else content

    def observation_ids(self, obs: str) -> list[int]:
        """Tool output as text: a printed `<|im_end|>` stays characters, never the control token. With tool turns,
        the template's tool turn around it, then the next generation prompt, with their control tokens."""
        if self.tool_turn is not None:
            return tool_turn_ids(self.tokenizer, self.tool_turn, self.style.tool_message(obs))
        return encode_text(self.tokenizer, obs)

    def capped_observation_ids(self, obs: str, cap: int) -> list[int]:
        """`observation_ids(obs)` within `cap` tokens. A tool turn keeps its framing whole (the template tokens that
        close the user turn and open the next assistant turn, without which the policy would go on writing inside
        the tool's turn) and cuts the tool output's ids; a cap below the framing's length cuts it like any text."""
        ids = self.observation_ids(obs)
        if len(ids) <= cap or self.tool_turn is None:
            return ids[:cap]
        content = self._capped_content_ids(obs, cap)
        if content is None:
            return ids[:cap]
        before, after = (self.tokenizer.encode(t, add_special_tokens=False) for t in self.tool_turn)
        return before + content + after

    def _capped_content_ids(self, obs: str, cap: int) -> list[int] | None:
        """The tool output's ids that fit a tool turn of `cap` tokens beside its framing; None when the framing alone
        is longer (the turn is then cut like any text)."""
        before, after = (self.tokenizer.encode(t, add_special_tokens=False) for t in self.tool_turn)
        room = cap - len(before) - len(after)
        return None if room < 0 else encode_text(self.tokenizer, self.style.tool_message(obs))[:room]

    def turn_ids(self, text: str) -> list[int]:
        """Token ids of an expert-written turn (SFT data); RL never re-encodes sampled text. With tool turns, a
        tool call's turn ends with the end-of-turn token, as the policy must write it."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        parsed = self.style.parse_turn(text)
        if self.tool_turn is not None and parsed.code is not None and not parsed.answered:
            ids.append(template_end_of_turn_id(self.tokenizer))
        return ids

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)


class SingleTurnMathAgent(TIRAgent):
    """`alprl/Math-v0`: system prompt `SINGLE_TURN_SYSTEM_PROMPT` (Qwen2.5-Math's chain-of-thought prompt, the ALP
    paper's single-turn setting), no stop strings: the one reply runs to its end or to `rollout.max_new_tokens`."""

    format_version = 1

    def messages(self, question: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": SINGLE_TURN_SYSTEM_PROMPT}, {"role": "user", "content": question}]

    def stop_strings(self, num_tool_calls: int) -> list[str]:
        return []

    def ended_turn_action(self, text: str) -> str | None:
        """The one reply, whatever it holds: there is no tool to run, so the env grades it as written."""
        return text
