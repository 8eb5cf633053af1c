"""TIR agent formatting: chat prompt, observation tokens, stop strings of the chosen style; and the single-turn
math agent (`alprl/Math-v0`), the same chat format without the tool.

The whole episode is ONE assistant message: turns and code-execution results are concatenated
(SimpleTIR-style), so observations are appended as plain tokens and the model continues after them.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from agents.control_tokens import chat_prompt_ids, encode_text, end_of_turn_ids
from envs.tir.styles import SINGLE_TURN_SYSTEM_PROMPT, get_style


class TIRAgent:
    format_version = 1
    """Bump when the prompt or observation text changes: SFT caches built with another version are rebuilt."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, style: str = "simpletir"):
        self.tokenizer = tokenizer
        self.style = get_style(style)

    def messages(self, question: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.style.system_prompt}, {"role": "user", "content": question}]

    def stop_strings(self, num_tool_calls: int) -> list[str]:
        """The style's stop strings; none once its tool-call budget is spent (ToRL's last round)."""
        return list(self.style.stop_for(num_tool_calls))

    def end_of_turn_ids(self) -> list[int]:
        """eos and the chat template's end-of-turn token: the whole episode is one assistant message, so either
        ends the episode (agents/rollout.py)."""
        return end_of_turn_ids(self.tokenizer)

    def ended_turn_action(self, text: str) -> str | None:
        """The action for a turn that closed the message: the turn itself when it answers or is void (the env
        grades it and runs nothing); None when it would run a tool call, which a closed message never does."""
        parsed = self.style.parse_turn(text)
        return text if parsed.answered or parsed.code is None else None

    def prompt_ids(self, first_obs: str, info: dict[str, Any]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, self.messages(first_obs))

    def observation_ids(self, obs: str) -> list[int]:
        """Tool output as text: a printed `<|im_end|>` stays characters, never the control token."""
        return encode_text(self.tokenizer, obs)

    def turn_ids(self, text: str) -> list[int]:
        """Token ids of an expert-written turn (SFT data); RL never re-encodes sampled text."""
        return self.tokenizer.encode(text, add_special_tokens=False)

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
