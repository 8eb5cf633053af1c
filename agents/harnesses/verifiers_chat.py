"""A verifiers harness that plays a task as a plain chat in the rollout's own process: the chat part of
verifiers' `null` harness (system prompt, the task's prompt, the model's reply; a resumed exchange replays the
conversation), without its tools.

Why it exists: every harness that ships with verifiers 0.4 runs as a PEP 723 script that `uv` sets up in the
rollout's runtime, downloading `uv` and the script's packages from PyPI on first use. This one needs neither, so
a verifiers taskset plays through alprl's policy endpoint on a machine without network
(tests/trainer/test_verifiers_harness.py). verifiers' `Harness.launch` contract allows it: "a harness may run its
loop in-process instead of launching a program, as long as every model call goes through `endpoint` + `secret`".
Each call still goes through verifiers' interception server, which records it on the trace and forwards it to
the run's client (agents/harnesses/verifiers_harness.py points that client at the policy endpoint).

verifiers loads a harness by plugin id, the name of an importable top-level module exporting one `Harness`
subclass in `__all__`. A taskset module ships this one as its own harness (its default: verifiers'
`default_harness_id`) by exporting it beside its `Taskset`:

    from agents.harnesses.verifiers_chat import ChatHarness
    __all__ = ["MyTaskset", "ChatHarness"]

Not supported: tools (the MCP tool servers the `null` harness offers the model; a task that serves some is
refused), streaming, compaction.
"""

from __future__ import annotations

import verifiers.v1 as vf
from openai import AsyncOpenAI  # verifiers requires it
from verifiers.v1.dialects.chat import message_to_wire


class ChatHarnessConfig(vf.HarnessConfig):
    """No knobs beyond verifiers' own (the model, client and sampling are the rollout's)."""


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    """One model call on the task's conversation per segment (module docstring)."""

    APPENDS_SYSTEM_PROMPT = True  # the system prompt is its own message, not folded into the user's
    SUPPORTS_RESUME = True  # a later segment relaunches on the whole conversation (verifiers' default resume)
    EXECUTES_CODE = False  # nothing the model writes runs: the subprocess runtime is safe for it
    NEEDS_CONTAINER = False  # it runs in the rollout's process, whatever the runtime

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> vf.ProgramResult:
        """Ask the model once through the interception server; the trace records the exchange."""
        if mcp_urls:
            raise vf.HarnessError(f"ChatHarness offers no tools, but the task serves {sorted(mcp_urls)}: use "
                                  "verifiers' `null` harness for a task with tools")
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(message_to_wire(m) for m in prompt or [])
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            reply = await client.chat.completions.create(model=ctx.model, messages=messages)
        return vf.ProgramResult(exit_code=0, stdout=reply.choices[0].message.content or "", stderr="")
