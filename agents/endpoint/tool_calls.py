"""Tools in, tool calls out: a request's `tools` checked against OpenAI's function schema, and the tool calls a
sampled turn holds, in the formats alprl's TIR styles write (envs/tir/styles.py), returned as OpenAI `tool_calls`.

- hermes: every `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block (arguments an object or a JSON
  string), any function name; the message's content is the text outside the blocks. A block that is not such JSON
  stays in the content, as vLLM's hermes parser leaves it.
- simpletir, torl: the style's code block (its own parser) is a call of the `code_interpreter` function (alprl's
  `CODE_INTERPRETER` schema), when the request lists a function of that name; the content is the whole turn,
  since the code block is part of the text those formats continue.

Canonical calls, `(name, arguments)` with arguments parsed from JSON where they are JSON, are what two messages
are compared by (agents/endpoint/chat.py), so a harness may send back a call with its own id or key order.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.endpoint.shapes import EndpointError
from envs.tir.styles import STYLES
from envs.tool_call_text import hermes_blocks

TOOL_FORMATS = tuple(STYLES)
CODE_TOOL = "code_interpreter"


def _bad_tools(message: str) -> EndpointError:
    return EndpointError(400, f"Invalid 'tools': {message}", param="tools", code="invalid_tools")


def check_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The request's `tools` as given, or None for none; a malformed schema raises a 400 naming what is wrong
    (each tool `{"type": "function", "function": {"name": str, "description"?: str, "parameters"?: object}}`)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _bad_tools(f"expected an array of tools, got {type(tools).__name__}")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise _bad_tools(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        fn = tool["function"]
        if not isinstance(fn.get("name"), str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", fn["name"]):
            raise _bad_tools(f"tools[{i}].function.name must be 1-64 letters, digits, '_' or '-'")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise _bad_tools(f"tools[{i}].function.parameters must be a JSON Schema object")
        if "description" in fn and not isinstance(fn["description"], str):
            raise _bad_tools(f"tools[{i}].function.description must be a string")
    return tools or None


def arguments_value(arguments: Any) -> Any:
    """A call's arguments as a value: a JSON string parsed, anything else as it is."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def canonical_calls(calls: Any) -> list[tuple[str, str]]:
    """OpenAI `tool_calls` (or none) as [(name, arguments as sorted JSON)], for comparing two messages."""
    out = []
    for call in calls or []:
        fn = (call or {}).get("function") or {}
        out.append((str(fn.get("name", "")), json.dumps(arguments_value(fn.get("arguments")), sort_keys=True)))
    return out


def _hermes_calls(text: str) -> tuple[str, list[tuple[str, Any]]]:
    calls, kept, at = [], [], 0
    for block in hermes_blocks(text):
        if block.error is not None:  # stays in the content, as vLLM's hermes parser leaves it
            continue
        calls.append((block.name, arguments_value(block.arguments)))
        kept.append(text[at: block.start])
        at = block.end
    kept.append(text[at:])
    return "".join(kept).strip() if calls else text, calls


def parse_tool_calls(text: str, tool_format: str, tools: list[dict[str, Any]] | None) -> tuple[str, list]:
    """(content, [(name, arguments)]) of a sampled turn's text; no calls without `tools` (module docstring)."""
    if not tools:
        return text, []
    if tool_format == "hermes":
        return _hermes_calls(text)
    if not any(t["function"]["name"] == CODE_TOOL for t in tools):
        return text, []
    parsed = STYLES[tool_format].parse_turn(text)
    if parsed.code is None or parsed.answered:
        return text, []
    return text, [(CODE_TOOL, {"code": parsed.code})]


def openai_tool_calls(calls: list[tuple[str, Any]], call_index: int) -> list[dict[str, Any]]:
    """OpenAI `tool_calls` with ids unique in the episode (`call_<call>_<k>`), arguments as a JSON string."""
    return [{"id": f"call_{call_index}_{k}", "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for k, (name, args) in enumerate(calls)]
