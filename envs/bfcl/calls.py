"""A model turn's tool calls → BFCL's call strings.

The env reads the hermes format (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, the format of Qwen's
chat templates and of alprl's `env.style=hermes`; arguments an object or a JSON string). Each call becomes the string
BFCL's function-calling handlers produce for it (`model_handler/utils.py` `convert_to_function_call`:
`name(k=repr(v),...)`), the form its simulators execute and its checker compares.

BFCL executes those strings with `eval`. They are safe to hand it only because they are built here, never taken
from the model's text: the name and every argument key must be Python identifiers, and every value is `repr` of a
JSON value (strings, numbers, booleans, null, lists, objects), a literal.
"""

from __future__ import annotations

import json
import re
from typing import Any

from envs.tool_call_text import hermes_blocks

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_calls(text: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(the well-formed calls `(name, arguments)` in order, a reason for each block that is not one); blocks are
    read by `envs.tool_call_text`, the policy endpoint's parser too."""
    calls, bad = [], []
    for block in hermes_blocks(text):
        if block.error is not None:
            bad.append(block.error)
            continue
        args = block.arguments
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                bad.append(f"{block.name}: arguments are not JSON")
                continue
        if not isinstance(args, dict):
            bad.append(f"{block.name}: arguments are not an object")
            continue
        if not _IDENTIFIER.fullmatch(block.name) or not all(_IDENTIFIER.fullmatch(str(k)) for k in args):
            bad.append(f"{block.name!r}: a name or argument key that is not an identifier")
            continue
        calls.append((block.name, args))
    return calls, bad


def call_string(name: str, arguments: dict[str, Any]) -> str:
    """BFCL's call string of one call (module docstring)."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def hermes_text(name: str, arguments: dict[str, Any]) -> str:
    """One call written as a model would write it in the hermes format."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
