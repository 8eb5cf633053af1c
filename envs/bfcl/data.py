"""BFCL's multi-turn categories as the `bfcl-eval` package ships them: its test entries, ground truth and function
docs, loaded by its own loaders (`bfcl_eval.utils.load_dataset_entry` / `load_ground_truth_entry`, which attach each
entry's function docs and hold out miss_func's), and the docs as OpenAI tool schemas.

`bfcl-eval` pins numpy 1.26 and pulls every provider SDK; alprl installs it with `--no-deps` (the Makefile's install
step): the multi-turn data, its API simulators and its checker import nothing beyond the standard library there.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
"""BFCL's multi-turn categories (test ids `multi_turn_<category>_<n>`)."""


class BFCLUnavailable(ImportError):
    """`bfcl-eval` is not installed (`make` installs it; by hand: `pip install --no-deps bfcl-eval`)."""


def _bfcl_utils():
    try:
        import bfcl_eval.utils as utils
    except ImportError as err:
        raise BFCLUnavailable(f"alprl/BFCL-v0 needs the bfcl-eval package ({err}); `make` installs it, or run "
                              "`pip install --no-deps bfcl-eval==2026.3.23`") from err
    return utils


def check_category(category: str) -> str:
    if category not in CATEGORIES:
        raise ValueError(f"BFCL category {category!r}: use one of {', '.join(CATEGORIES)}")
    return category


@functools.cache
def entries(category: str) -> tuple[dict[str, Any], ...]:
    """The category's test entries in BFCL's order, each with its `function` docs (and miss_func's
    `missed_function`: turn → the docs added at that turn), as BFCL's inference reads them."""
    name = f"multi_turn_{check_category(category)}"
    return tuple(_bfcl_utils().load_dataset_entry(name))


@functools.cache
def ground_truth(category: str) -> dict[str, list[list[str]]]:
    """Entry id → its ground truth: per user turn, the function calls (BFCL's call strings) that solve it."""
    loaded = _bfcl_utils().load_ground_truth_entry(f"multi_turn_{check_category(category)}")
    return {row["id"]: row["ground_truth"] for row in loaded}


def _openai_type(schema: dict[str, Any]) -> dict[str, Any]:
    """One parameter schema with BFCL's type names mapped to JSON Schema's (`GORILLA_TO_OPENAPI`, the map BFCL's
    own function-calling handlers use), nested properties and items included; an unknown or missing type reads
    "string", as there."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    out = dict(schema)
    out["type"] = GORILLA_TO_OPENAPI.get(schema.get("type", "string"), "string")
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _openai_type(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _openai_type(schema["items"])
    return out


def openai_tools(function_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs → OpenAI `tools` (`{"type": "function", "function": {name, description, parameters}}`),
    parameters as JSON Schema objects."""
    tools = []
    for doc in function_docs:
        params = doc.get("parameters") or {"type": "dict", "properties": {}}
        tools.append({"type": "function", "function": {"name": doc["name"], "description": doc.get("description", ""),
                                                       "parameters": _openai_type(copy.deepcopy(params))}})
    return tools
