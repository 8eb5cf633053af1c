"""alprl's TIR agent loop written against the OpenAI API: an example harness (`env.harness=
agents.harnesses.tir_harness:play`) that plays the configured TIR style through the policy endpoint the way the
native rollout (agents/rollout.py, agents/formats/tir_agent.py) plays it, so its trajectories hold the native rollout's
token ids and masks for the same sampled tokens (tests/agents/test_policy_endpoint.py checks it).

Two loops, as the native agent has two formats:
- **one message** (simpletir, torl, hermes without tool turns): the episode is one assistant message. Each call
  continues it (vLLM's `continue_final_message`, the stop string kept with `include_stop_str_in_output`); a turn
  that stopped at a stop string or ran out of tokens steps the env, its observation is appended to the message; a
  turn that closed the message (its stop reason the end-of-turn id) ends the episode, graded unless it holds a tool
  call, which a closed message never runs.
- **tool turns** (hermes under a chat template that renders `tool` messages): each call gets `tools`, a reply
  with `tool_calls` runs the first call's code (as the native env runs the turn's first call) and the result goes
  back as a `tool` message; a reply without one ends the episode, graded.
Tool results go back unabridged: the native rollout cuts an observation to `rollout.max_obs_tokens` ids, which a
harness without the tokenizer cannot, so a longer one is where the two streams part.
"""

from __future__ import annotations

import json
from typing import Any

from agents.endpoint.harness import HarnessTask
from envs.tir.styles import get_style

ONE_MESSAGE = {"include_stop_str_in_output": True, "return_token_ids": True}


def _closed(choice: Any) -> bool:
    """The turn ended at a stop token (the template's end-of-turn or eos), not at a stop string or the budget."""
    return choice.finish_reason != "length" and isinstance((choice.model_extra or {}).get("stop_reason"), int)


async def _one_message(client: Any, task: HarnessTask) -> tuple[float, dict]:
    style, content, calls = get_style(task.style or "simpletir"), "", 0
    while True:
        messages = task.messages + ([{"role": "assistant", "content": content}] if content else [])
        r = await client.chat.completions.create(
            model=task.model, messages=messages, stop=task.stop_strings(calls) or None,
            extra_body=ONE_MESSAGE | {"continue_final_message": bool(content), "add_generation_prompt": not content})
        choice = r.choices[0]
        text = choice.message.content or ""
        if not text and choice.finish_reason == "length":  # no room left: the episode ends truncated
            return 0.0, {"truncated": True}
        if _closed(choice):
            parsed = style.parse_turn(text)
            if parsed.code is not None and not parsed.answered and task.stop:
                return 0.0, {"unrun_tool_call": True}
            _, reward, _, _, _ = await task.step(text)
            return reward, {}
        obs, reward, terminated, truncated, info = await task.step(text)
        if terminated or truncated:
            return reward, {"truncated": truncated}
        calls = info.get("num_tool_calls", calls + 1)
        content += text + obs


async def _tool_turns(client: Any, task: HarnessTask) -> tuple[float, dict]:
    style, messages = get_style(task.style or "hermes"), list(task.messages)
    while True:
        r = await client.chat.completions.create(model=task.model, messages=messages, tools=task.tools,
                                                 extra_body={"return_token_ids": True})
        choice = r.choices[0]
        message = choice.message
        if not message.content and not message.tool_calls and choice.finish_reason == "length":
            return 0.0, {"truncated": True}
        call = message.tool_calls[0] if message.tool_calls else None
        code = json.loads(call.function.arguments).get("code") if call is not None else None
        action = (message.content or "") + (style.format_tool_call(code) if isinstance(code, str) else "")
        obs, reward, terminated, truncated, _ = await task.step(action)
        if terminated or truncated or call is None:
            return reward, {"truncated": truncated}
        messages.append(message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": style.tool_message(obs)})


async def play(task: HarnessTask, base_url: str, api_key: str) -> tuple[float, dict]:
    """The episode's reward and facts (agents/endpoint/harness.py's contract)."""
    from openai import AsyncOpenAI  # the dev extra; a harness brings its own client

    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=600) as client:
        if task.tools and not task.stop:
            return await _tool_turns(client, task)
        return await _one_message(client, task)
