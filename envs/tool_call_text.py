"""Tool calls written in a model's text, the hermes format (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`,
the format of Qwen's chat templates): the one parser of its blocks, for the envs that read calls from text (BFCL)
and the policy endpoint that returns them as OpenAI `tool_calls` (agents/endpoint/tool_calls.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class HermesBlock:
    """One `<tool_call>` block: its span in the text and either the call (`name`, `arguments` as written: an object,
    or a string that may hold JSON) or why it is not one (`error`)."""

    start: int
    end: int
    name: str | None = None
    arguments: Any = None
    error: str | None = None


def hermes_blocks(text: str) -> list[HermesBlock]:
    """Every `<tool_call>` block of `text` in order; a block that is not a JSON object with a string `name` carries
    the reason instead of a call."""
    blocks = []
    for match in HERMES_CALL.finditer(text):
        try:
            payload = json.loads(match.group(1))
        except ValueError as err:
            blocks.append(HermesBlock(match.start(), match.end(), error=f"not JSON ({err.msg})"))
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            blocks.append(HermesBlock(match.start(), match.end(), error="no function name"))
            continue
        blocks.append(HermesBlock(match.start(), match.end(), payload["name"], payload.get("arguments", {})))
    return blocks
