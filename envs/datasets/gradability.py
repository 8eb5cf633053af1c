"""Which gold answers math-verify cannot grade, decided from the text alone, in one linear pass.

Such a gold (a row of a benchmark file, after `answers.normalize_answer`) is not refused: the row is played, its
answers are compared as strings (`envs.tir.grading.grade`), and `alprl eval` names it as ungradable (file, row,
reason). The rules catch the pathological shapes that cost math-verify its whole time budget on every sample, or
that no prediction can ever match:

- unbalanced braces (`\\frac{1}{`): LaTeX that does not parse; and a prediction is a complete `\\boxed{...}`,
  whose content always has balanced braces, so math-verify could never be handed an equal string;
- nesting deeper than `MAX_NESTING` braces, parentheses or brackets (`\\sqrt{` 200 deep): no real answer nests
  that deep, and math-verify's recursive parse runs out of its budget on such input;
- an exponent tower higher than `MAX_TOWER` (`x^x^x^...`, `10^{10^{10^{10}}}`): sympy evaluates numeric powers,
  so every wrong prediction costs the grader's whole timeout, and a symbolic tower parses for seconds;
- more than `MAX_GRADED_CHARS` characters (a 5,000-digit integer): the grader never parses a prediction that
  long (`envs.tir.grading.MAX_ANSWER_CHARS`), so math-verify could never call one equal.
"""

from __future__ import annotations

import functools
import re

MAX_GRADED_CHARS = 1000  # = envs.tir.grading.MAX_ANSWER_CHARS (that module imports this one, not the reverse)
MAX_NESTING = 20
MAX_TOWER = 2  # a^{b^{c}} is graded; a^{b^{c^{d}}} is not
_OPENERS, _CLOSERS = "{([", "})]"
_PLAIN_INTEGER = re.compile(r"[+-]?[0-9]+")


def _structural(text: str):
    """The characters of `text` with escaped braces left out: `\\{` and `\\}` are literal set braces, and a
    piecewise answer (`\\left\\{ ... \\right.`) opens one without closing it."""
    i = 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1: i + 2] in ("{", "}"):
            i += 2
            continue
        yield text[i]
        i += 1


def brace_balance(text: str) -> int:
    """0 when every '{' is closed in order; > 0: that many '{' never closed; -1: a '}' closes nothing."""
    depth = 0
    for ch in _structural(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return -1
            depth -= 1
    return depth


def nesting_depth(text: str) -> int:
    """Deepest nesting of braces, parentheses and brackets together (a closer of any kind closes one level, so
    intervals such as `[0, 1)` count as one level)."""
    depth = deepest = 0
    for ch in _structural(text):
        if ch in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSERS and depth:
            depth -= 1
    return deepest


def _exponent_token_end(text: str, start: int) -> int:
    """Index after the one-token exponent at `start` (`^2`, `^x`, `^\\pi`): a command's letters, else one character."""
    if start < len(text) and text[start] == "\\":
        end = start + 1
        while end < len(text) and text[end].isalpha():
            end += 1
        return max(end, start + 2)
    return start + 1


def tower_height(text: str) -> int:
    """How many exponents stand on each other at most: `x^2` 1, `2^{2^{n}}` 2, `10^{10^{10^{10}}}` 3, and
    `x^x^x` 2 (an unbraced exponent followed by '^' carries the next one, as a right-associative parse reads it)."""
    group_levels = [0]  # exponent level of each open brace group, outermost first
    chained = None  # level of the unbraced exponent token just read, which a '^' right after it stands on
    highest = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "^":
            level = (chained if chained is not None else group_levels[-1]) + 1
            highest = max(highest, level)
            j = i + 1
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == "{":
                group_levels.append(level)
                chained, i = None, j + 1
            else:
                chained, i = level, _exponent_token_end(text, j)
            continue
        chained = None
        if ch == "{":
            group_levels.append(group_levels[-1])
        elif ch == "}" and len(group_levels) > 1:
            group_levels.pop()
        i += 1
    return highest


@functools.lru_cache(maxsize=4096)  # grade() asks once per sample; a benchmark's golds repeat
def ungradable_reason(gold: str) -> str:
    """Why math-verify cannot grade `gold` ("" when it can), in words for a summary line."""
    balance = brace_balance(gold)
    if balance > 0:
        return f"unbalanced braces ({balance} '{{' never closed)"
    if balance < 0:
        return "unbalanced braces (a '}' closes nothing)"
    depth = nesting_depth(gold)
    if depth > MAX_NESTING:
        return f"nested {depth} deep (more than {MAX_NESTING})"
    height = tower_height(gold)
    if height > MAX_TOWER:
        return f"an exponent tower {height} high (more than {MAX_TOWER})"
    if len(gold) > MAX_GRADED_CHARS:
        what = f"a {len(gold.lstrip('+-'))}-digit integer" if _PLAIN_INTEGER.fullmatch(gold) else \
            f"{len(gold)} characters long"
        return f"{what} (predictions over {MAX_GRADED_CHARS} characters are never parsed)"
    return ""
