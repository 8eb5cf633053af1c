"""The ground-truth player of BFCL multi-turn: each user turn answered by its ground-truth calls in one step, then a
turn without calls (which ends the user turn). It scores 100% by BFCL's checker (tests/envs/test_bfcl.py), the
check that the env runs BFCL's protocol as BFCL does, and it writes expert turns for SFT.

Ground-truth calls are BFCL call strings, some with positional arguments (`sort('final_report.pdf')`); they are read
with `ast` (literals only) and named after the function doc's parameters, in the doc's order.
"""

from __future__ import annotations

import ast
from typing import Any

from .calls import hermes_text


def _named(call: str, docs: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a BFCL call string: {call!r}")
    name = node.func.id
    order = list((docs[name].get("parameters") or {}).get("properties", {}))
    args = {order[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args |= {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    return name, args


CLOSING_TURN = "Done."
"""The ground-truth player's reply without a call, which ends a user turn."""


def expert_turns(entry: dict[str, Any], truth: list[list[str]]) -> list[list[str]]:
    """Per user turn, the model turns of the ground-truth player: one with every call (none where the ground truth
    has none), then a reply without a call (`CLOSING_TURN`) that ends the user turn."""
    docs = {d["name"]: d for d in entry["function"]}
    for added in entry.get("missed_function", {}).values():
        docs |= {d["name"]: d for d in added}
    turns = []
    for calls in truth:
        text = "".join(hermes_text(*_named(c, docs)) for c in calls)
        turns.append([text, CLOSING_TURN] if text else [CLOSING_TURN])
    return turns
