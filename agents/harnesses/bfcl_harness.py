"""BFCL through the policy endpoint: an OpenAI-client agent plays `alprl/BFCL-v0` (`rollout.source=harness
env.harness=agents.harnesses.bfcl_harness:play`), as a BFCL function-calling handler would: each call sends the
conversation and the entry's tools, the reply's `tool_calls` go to the env (written back in the hermes format the
env reads), the results come back as `tool` messages answering those calls, and a reply without calls ends the user
turn; the env's next user turn follows. The episode's tokens are the native BFCL agent's, call for call
(tests/agents/test_bfcl_harness.py); the env must serve messages (`observation="messages"`, as the env family
makes it).
"""

from __future__ import annotations

import json
from typing import Any

from agents.endpoint.harness import HarnessTask
from envs.bfcl.calls import hermes_text


def _action(message: Any) -> str:
    """The reply as the env reads it: its calls in the hermes format, else its text."""
    calls = message.tool_calls or []
    if calls:
        return "".join(hermes_text(c.function.name, json.loads(c.function.arguments or "{}")) for c in calls)
    return message.content or ""


async def play(task: HarnessTask, base_url: str, api_key: str) -> tuple[float, dict]:
    import openai

    messages = list(task.messages)
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        while True:
            r = await client.chat.completions.create(model=task.model, messages=messages, tools=task.tools)
            message = r.choices[0].message
            obs, reward, terminated, truncated, info = await task.step(_action(message))
            messages.append(message.model_dump(exclude_none=True))
            if terminated or truncated:
                return reward, {"won": bool(info.get("won"))}
            arrived = json.loads(obs)
            ids = iter(c.id for c in message.tool_calls or [])
            messages += [m | {"tool_call_id": next(ids)} if m["role"] == "tool" else m for m in arrived]
