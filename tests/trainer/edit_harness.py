"""A harness for tests/trainer/test_harness_source.py (`env.harness=edit_harness:play`): it asks the policy twice,
the second time after rewriting its system prompt, so every episode makes a prefix break and comes back as two
samples; its reward is the parity of the first reply's length, so groups have a spread."""

from __future__ import annotations

import openai


async def play(task, base_url: str, api_key: str) -> float:
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        first = await client.chat.completions.create(model=task.model, messages=task.messages)
        edited = [{"role": "system", "content": "Answer briefly."}, *task.messages[1:]]
        await client.chat.completions.create(model=task.model, messages=edited)
    return float(len(first.choices[0].message.content or "") % 2)
