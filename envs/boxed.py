"""`\\boxed{...}` answer extraction, shared by the TIR grader (`envs/tir/grading.py`) and the dataset loader's gold
normalization (`envs/datasets/answers.py`).

It sits outside both packages so that the loader does not import `envs.tir`, whose envs read dataset files: the
imports stay a line, not a circle. Both functions make one linear pass, so adversarial model text cannot make them
quadratic.
"""

from __future__ import annotations

BOX_COMMANDS = ("\\boxed", "\\fbox")


def _matching_braces(text: str) -> dict[int, int]:
    """Map the index of every balanced '{' to the index of its '}' (one pass, a stack)."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def _box_openings(text: str) -> list[int]:
    """Indices of the '{' that opens each `\\boxed{` / `\\fbox{` (spaces allowed before the brace)."""
    found = []
    for cmd in BOX_COMMANDS:
        start = text.find(cmd)
        while start != -1:
            j = start + len(cmd)
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == "{":
                found.append(j)
            start = text.find(cmd, start + 1)
    return sorted(found)


def extract_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` or `\\fbox{...}` in `text`, or None."""
    openings = _box_openings(text)
    if not openings:
        return None
    pairs = _matching_braces(text)
    for brace in reversed(openings):
        if brace in pairs:
            return text[brace + 1: pairs[brace]]
    return None


def has_boxed(text: str) -> bool:
    """Whether the text attempts a boxed answer (SimpleTIR's test: `\\boxed{` appears), complete or not."""
    return bool(_box_openings(text))
