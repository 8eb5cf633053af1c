"""One line of working per generated task: what the single-turn expert writes before its `\\boxed{}` answer.

`alprl/Math-v0` has no tool, so its scripted expert (`envs.tir.expert.single_turn_reply`) shows the computation in
text instead. Each line restates the problem and breaks it into steps a small model can imitate one at a time
(isolate x, then divide; substitute, then add the terms), and ends with the gold answer:

| type | question | working |
|---|---|---|
| multiply, add | Compute 482 * 937. | 482 * 937 = 451634 |
| expression | Compute (482 + 937) * 61. | (482 + 937) * 61 = 1419 * 61 = 86559 |
| modpow | What is 7^123 mod 97? | 7^123 mod 97 = 37 |
| modinv | What is the inverse of 17 mod 101? | 17 * 6 = 102 = 1 * 101 + 1, so the inverse is 6 |
| linear, linear_small | Solve 3*x + 17 = 62 for x. | 3*x = 62 - 17 = 45, so x = 45/3 = 15 |
| quadratic | What is the larger root of x^2 - 5*x - 14 = 0? | x^2 - 5*x - 14 = (x - 7)*(x + 2), so the roots are 7 and -2 |
| polyeval | Evaluate 3*x^2 - 7*x + 12 at x = 23. | 3*23^2 - 7*23 + 12 = 1587 - 161 + 12 = 1438 |

The lines parse the question forms of `envs/tir/tasks.py` (its generators are the only source of these tasks; a
dataset problem has no task type here and `alprl sft` refuses datasets). Arithmetic is exact: integers and
`Fraction`s, evaluated by a small walker over `+ - * ^` and parentheses (never `eval`).
"""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction

from envs.tir.tasks import TIRTask

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Pow: operator.pow}


def _value(expr: str) -> int:
    """The integer value of `expr`: integers, `+ - *`, `^` (power) and parentheses, as the generator writes them."""
    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"not an integer expression of + - * ^: {expr!r}")

    return walk(ast.parse(expr.replace("^", "**"), mode="eval").body)


def _signed(v: int | Fraction) -> str:
    """A value as an operand: negative values in parentheses."""
    return f"({v})" if v < 0 else str(v)


def _minus(a: int, b: int) -> str:
    """a - b written readably: 62 - 17, or 62 + 17 when b = -17."""
    return f"{a} - {b}" if b >= 0 else f"{a} + {-b}"


def _terms(poly: str) -> list[tuple[int, str]]:
    """Signed terms of a generated polynomial: "3*x^2 - 7*x + 12" → [(1, "3*x^2"), (-1, "7*x"), (1, "12")]."""
    parts = re.split(r" ([+-]) ", poly.strip())
    head = parts[0]
    out = [(-1, head[1:]) if head.startswith("-") else (1, head)]
    out += [(1 if op == "+" else -1, term) for op, term in zip(parts[1::2], parts[2::2], strict=True)]
    return out


def _coefficients(poly: str) -> dict[int, int]:
    """Power → coefficient of a generated polynomial in x ("x^2 - 5*x - 14" → {2: 1, 1: -5, 0: -14})."""
    coeffs: dict[int, int] = {}
    for sign, term in _terms(poly):
        match = re.fullmatch(r"(?:(\d+)\*?)?(x(?:\^(\d+))?)?", term)
        if match is None or not (match.group(1) or match.group(2)):
            raise ValueError(f"not a polynomial term in x: {term!r} of {poly!r}")
        power = 0 if not match.group(2) else int(match.group(3) or 1)
        coeffs[power] = coeffs.get(power, 0) + sign * int(match.group(1) or 1)
    return coeffs


def _computed(expr: str, answer: str) -> str:
    """`expr = <its parenthesized groups evaluated> = answer` (the middle step only when there are groups)."""
    inner = re.sub(r"\(([^()]*)\)", lambda m: _signed(_value(m.group(1))), expr)
    return f"{expr} = {answer}" if inner == expr else f"{expr} = {inner} = {answer}"


def _linear(question: str, answer: str) -> str:
    left, right = re.fullmatch(r"Solve (.+) = (.+) for x\.", question).groups()
    lhs, rhs = _coefficients(left), _coefficients(right)
    a, c, b, e = lhs.get(1, 0), rhs.get(1, 0), lhs.get(0, 0), rhs.get(0, 0)
    k = a - c  # x gathered on the left, the constants on the right: k*x = e - b
    gathered = f"{k}*x" if not c else f"({a} - {c})*x = {k}*x"
    line = f"{gathered} = {_minus(e, b)} = {e - b}"
    ratio = f"{e - b}/{_signed(k)}"
    return f"{line}, so x = {answer}" if ratio == answer or k == 1 else f"{line}, so x = {ratio} = {answer}"


def _quadratic(question: str, answer: str) -> str:
    poly = re.fullmatch(r"What is the larger root of (.+) = 0\?", question).group(1)
    c = _coefficients(poly)
    larger = Fraction(answer)
    other = Fraction(-c.get(1, 0), c[2]) - larger  # the roots sum to -b/a
    if c[2] == 1 and larger.denominator == other.denominator == 1:
        factors = "*".join("x" if r == 0 else f"(x {'-' if r > 0 else '+'} {abs(r)})" for r in (larger, other))
        return f"{poly} = {factors}, so the roots are {larger} and {other}"
    return f"The roots of {poly} = 0 are {larger} and {other}"


def _polyeval(question: str, answer: str) -> str:
    poly, x = re.fullmatch(r"Evaluate (.+) at x = (-?\d+)\.", question).groups()
    terms = [(sign, term.replace("x", _signed(int(x)))) for sign, term in _terms(poly)]
    substituted = " ".join(("-" if s < 0 else "") + t if i == 0 else f"{'+' if s > 0 else '-'} {t}"
                           for i, (s, t) in enumerate(terms))
    values = [s * _value(t) for s, t in terms]
    summed = " ".join(str(v) if i == 0 else f"{'+' if v >= 0 else '-'} {abs(v)}" for i, v in enumerate(values))
    return f"{substituted} = {summed} = {answer}"


def _modinv(question: str, answer: str) -> str:
    a, m = map(int, re.fullmatch(r"What is the inverse of (\d+) mod (\d+)\?", question).groups())
    product = a * int(answer)
    return f"{a} * {answer} = {product} = {product // m} * {m} + 1, so the inverse is {answer}"


def _modpow(question: str, answer: str) -> str:
    power = re.fullmatch(r"What is (.+)\?", question).group(1)
    return f"{power} = {answer}"


def _compute(question: str, answer: str) -> str:
    return _computed(re.fullmatch(r"Compute (.+)\.", question).group(1), answer)


WORKING = {"multiply": _compute, "add": _compute, "expression": _compute, "modpow": _modpow, "modinv": _modinv,
           "linear": _linear, "linear_small": _linear, "quadratic": _quadratic, "polyeval": _polyeval}
"""Task type → (question, gold answer) → the line of working (no final period)."""


def working_line(task: TIRTask) -> str:
    """The working for a generated `task`, ending in its gold answer (see the module docstring's table)."""
    if task.task_type not in WORKING:
        raise ValueError(f"no working for task type {task.task_type!r} (a dataset problem?); the single-turn expert "
                         f"works generated tasks only: {', '.join(WORKING)}")
    return WORKING[task.task_type](task.question, task.answer)
