"""Answers to reasoning-gym problems that reasoning-gym's scorers give partial credit (or none) for, built from each
entry's own oracle answer and metadata; shared by the env tests and the `alprl eval` tests of reasoning-gym."""

from __future__ import annotations


def partly_right(name: str, entry: dict) -> str:
    """basic_arithmetic: the answer off by one (no credit); spell_backward: the last letter wrong (credit per right
    letter); knights_knaves: the last inhabitant's role flipped (0.3 + 0.7 x the share of right roles)."""
    if name == "basic_arithmetic":
        return str(int(entry["answer"]) + 1)
    if name == "spell_backward":
        return entry["answer"][:-1] + ("x" if entry["answer"][-1] != "x" else "y")
    if name != "knights_knaves":
        raise ValueError(f"no partly right answer for {name!r}")
    meta = entry["metadata"]
    terms, roles = meta["knight_knave_terms"], [*meta["solution"][:-1], not meta["solution"][-1]]
    said = [f"{person} is {terms['a_knight'] if role else terms['a_knave']}"
            for person, role in zip(meta["names"], roles, strict=True)]
    return ", ".join(said[:-1]) + f", and {said[-1]}."
