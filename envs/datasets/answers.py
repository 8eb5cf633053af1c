"""Gold-answer normalization: what the files hold → the string `envs.tir.grading.grade` compares against.

- A `\\boxed{...}` / `\\fbox{...}` inside the value (nested braces allowed) → its content (the last complete box,
  the convention of MATH-style solutions; same extractor as the TIR grader).
- Math delimiters around the whole value are dropped: `$…$`, `$$…$$`, `\\(…\\)`, `\\[…\\]` (the grader wraps the
  gold in `$…$` itself; a bare gold is the same string however the file wrote it, and "$33$" reaches the grader's
  integer fast path as "33").
- A plain integer loses its leading zeros and `+` sign (AIME answers are written "033" or 33; both mean 33).
- A list (OlympiadBench `final_answer`) → its items normalized and joined with ", ": math-verify parses that as a
  set of answers, so a prediction must give all of them, in any order ("1/2, 3" matches "3, \\frac{1}{2}"; "3"
  alone does not).
"""

from __future__ import annotations

import re

from envs.boxed import extract_boxed

PLAIN_INTEGER = re.compile(r"[+-]?[0-9]+")
LIST_SEPARATOR = ", "
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


class AnswerError(ValueError):
    """An answer value that cannot be used as a gold answer (the loader adds file, row and field)."""


def _strip_delimiters(text: str) -> str:
    # Moves two indices instead of slicing each round, so "$$$$…" (a model's answer, too) costs linear time.
    start, end = 0, len(text)
    changed = True
    while changed:
        changed = False
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        for left, right in _DELIMITERS:
            if end - start >= len(left) + len(right) and text.startswith(left, start, end) \
                    and text.endswith(right, start, end):
                # "$1$ or $2$" is two formulas, not one delimited one: only strip when no inner delimiter remains.
                if left == "$" and text.find("$", start + 1, end - 1) != -1:
                    continue
                start, end, changed = start + len(left), end - len(right), True
                break
    return text[start:end]


def canonical_integer(text: str) -> str:
    """A plain integer without `+` and leading zeros ("-007" → "-7", "-0" → "0"), by string operations: `int()`
    refuses strings over 4,300 digits (CPython's int_max_str_digits), and a gold or a model answer can be longer."""
    sign = "-" if text.startswith("-") else ""
    digits = text.lstrip("+-").lstrip("0") or "0"
    return digits if digits == "0" else sign + digits


def normalize_text(text: str) -> str:
    """One answer string, normalized as described in the module docstring."""
    boxed = extract_boxed(text)
    if boxed is not None:
        text = boxed
    text = _strip_delimiters(text)
    if PLAIN_INTEGER.fullmatch(text):
        text = canonical_integer(text)
    return text


def normalize_answer(value: object, *, integer: bool = False) -> str:
    """Normalize a gold answer (str, int, float with an integral value, or list of those).

    `integer=True` (AIME) requires an integer answer. Raises AnswerError for empty or unusable values.
    """
    if isinstance(value, bool) or value is None:
        raise AnswerError(f"expected an answer, got {value!r}")
    if isinstance(value, (list, tuple)):
        if integer:
            raise AnswerError(f"expected an integer answer, got a list {value!r:.80}")
        parts = [normalize_answer(v) for v in value]
        if not parts:
            raise AnswerError("empty answer (an empty list)")
        return LIST_SEPARATOR.join(parts)
    if isinstance(value, float):
        if not value.is_integer():
            if integer:
                raise AnswerError(f"expected an integer answer, got {value!r}")
            return repr(value)
        value = int(value)
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise AnswerError(f"expected a string, number or list, got {type(value).__name__}")
    text = normalize_text(value)
    if not text:
        raise AnswerError("empty answer")
    if integer and not PLAIN_INTEGER.fullmatch(text):
        raise AnswerError(f"expected an integer answer, got {value!r:.80}")
    return text


def answer_from_solution(solution: object) -> str:
    """The boxed answer of a worked solution (Minerva Math, MATH `solution`); AnswerError if it has none."""
    if not isinstance(solution, str):
        raise AnswerError(f"expected a solution string, got {type(solution).__name__}")
    boxed = extract_boxed(solution)
    if boxed is None:
        raise AnswerError("no complete \\boxed{...} answer in the solution")
    return normalize_answer(boxed)
