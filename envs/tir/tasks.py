"""Seeded generator of short math problems where a Python tool pays off.

Every task is a pure function of `(split, index)` (plus the optional `difficulty` / `task_types` filters):
the generator seeds `random.Random` from a hash of `(split, index, attempt)`, so any process, thread or
machine rebuilds the same task, and a GRPO group is G envs reset with the same index.

Splits (reference/environments.md §0.1, WebShop-style global index ranges): test 0-499, valid 500-1499,
train >= 1500. On top of the index ranges the splits are disjoint *by content*: a question's hash picks the
one split it may belong to (1/16 of all questions are test, 1/16 valid, 14/16 train) and the generator
redraws (next `attempt`) until the question falls in the requested split. So no test question is ever
a train question, even for task types with a small question space, and type/difficulty mixes are the
same in every split.

Task types (question, gold answer, solution code; `^` in questions is a power, `**` in code):

| type | example question | gold |
|---|---|---|
| multiply | Compute 4821 * 937. | 4517277 |
| add | Compute 48213 - 9370 + 12345. | 51188 |
| expression | Compute (482 + 937) * 61. | 86559 |
| modpow | What is 7^123 mod 97? | 37 |
| modinv | What is the inverse of 17 mod 101? | 6 |
| linear | Solve 3*x + 17 = 62 for x. | 15 (or a fraction such as 45/7) |
| quadratic | What is the larger root of x^2 - 5*x - 14 = 0? | 7 (or a fraction such as 3/2) |
| polyeval | Evaluate 3*x^3 - 7*x + 12 at x = 23. | 36362 |

Drawn only when `task_types` names it (`NAMED_ONLY_TASK_TYPES`; the default mix above is pinned, eval sets depend on
it):

| linear_small | Solve 7*x + 12 = 68 for x. | 8 (x ≥ 0, b > 0: c − b is a plain difference, x a times-table quotient) |

Gold answers are exact: integers or reduced fractions `p/q`, exactly what `solution_code` prints, and
parseable by math-verify. Difficulty 1-3 scales operand sizes and the number of terms.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from envs.splits import SPLIT_RANGES

DIFFICULTIES = (1, 2, 3)
_BUCKETS = 16  # content hash buckets: 0 -> test, 1 -> valid, 2..15 -> train
_MAX_ATTEMPTS = 10_000


@dataclass(frozen=True)
class TIRTask:
    """One problem (generated here, or from a dataset source). `answer` is the gold string (never shown to the
    policy). `scorer`: the grader of a source that brings its own (a reasoning-gym problem's `score_answer`), which
    maps an extracted answer (None: no box) to a score in [0, 1]; None grades `answer` with math-verify
    (`envs.tir.problems.score`)."""

    task_id: str
    task_type: str
    difficulty: int
    question: str
    answer: str
    solution_code: str
    scorer: Callable[[str | None], float] | None = field(default=None, compare=False, repr=False)


# ---------------------------------------------------------------- formatting helpers


def _digits(rng: random.Random, n: int) -> int:
    """A random integer with exactly n decimal digits."""
    return rng.randint(10 ** (n - 1), 10**n - 1)


def _signed_sum(first: int, rest: Sequence[tuple[str, int]]) -> str:
    return " ".join([str(first)] + [f"{op} {v}" for op, v in rest])


def _poly(coeffs: Sequence[int], power: str) -> str:
    """Polynomial text from coefficients (highest degree first), e.g. [3, 0, -7, 12] -> 3*x^3 - 7*x + 12."""
    deg = len(coeffs) - 1
    out: list[str] = []
    for i, c in enumerate(coeffs):
        if c == 0:
            continue
        p = deg - i
        mag = abs(c)
        var = "" if p == 0 else ("x" if p == 1 else f"x{power}{p}")
        body = str(mag) if p == 0 else (var if mag == 1 else f"{mag}*{var}")
        sign = "-" if c < 0 else "+"
        out.append(("-" + body if c < 0 else body) if not out else f"{sign} {body}")
    return " ".join(out) if out else "0"


def _minus(a: int, b: int) -> str:
    """Python text for a - b that stays readable when b < 0 (62 - -17 -> 62 + 17)."""
    return f"{a} - {b}" if b >= 0 else f"{a} + {-b}"


def _frac(value: Fraction) -> str:
    return str(value)  # "15", "-45/7": what Fraction and sympy both print


# ---------------------------------------------------------------- generators: (rng, difficulty) -> (q, a, code)

Generated = tuple[str, str, str]


def _multiply(rng: random.Random, d: int) -> Generated:
    if d == 1:
        factors = [_digits(rng, 3), _digits(rng, 3)]
    elif d == 2:
        factors = [_digits(rng, 4), _digits(rng, rng.choice((3, 4)))]
    elif rng.random() < 0.5:
        factors = [_digits(rng, 4), _digits(rng, 3), _digits(rng, 3)]
    else:
        factors = [_digits(rng, 5), _digits(rng, 5)]
    expr = " * ".join(map(str, factors))
    return f"Compute {expr}.", str(math.prod(factors)), f"print({expr})"


def _add(rng: random.Random, d: int) -> Generated:
    n_terms, width = {1: (2, 4), 2: (3, 4), 3: (4, 5)}[d]
    first = _digits(rng, width)
    rest = [("+" if d == 1 else rng.choice("+-"), _digits(rng, rng.choice((width - 1, width))))
            for _ in range(n_terms - 1)]
    expr = _signed_sum(first, rest)
    value = first + sum(v if op == "+" else -v for op, v in rest)
    return f"Compute {expr}.", str(value), f"print({expr})"


def _expression(rng: random.Random, d: int) -> Generated:
    a, b, c, e = (_digits(rng, 3) for _ in range(4))
    f, g = _digits(rng, 4), _digits(rng, 2)
    templates = {  # difficulty -> [(text, value)]
        1: [(f"({a} + {b}) * {g}", (a + b) * g)],
        2: [(f"{a} * {b} - {c} * {e}", a * b - c * e), (f"({a} - {b}) * {c} + {e}", (a - b) * c + e)],
        3: [(f"({a} + {b}) * ({c} - {e}) - {f} * {g}", (a + b) * (c - e) - f * g),
            (f"{f} * ({a} - {b}) + {c} * {e} * {g}", f * (a - b) + c * e * g)],
    }
    expr, value = rng.choice(templates[d])
    return f"Compute {expr}.", str(value), f"print({expr})"


def _modpow(rng: random.Random, d: int) -> Generated:
    a_rng, b_rng, m_rng = {1: ((2, 19), (10, 99), (11, 97)), 2: ((10, 99), (100, 999), (101, 999)),
                           3: ((100, 999), (1000, 9999), (1001, 99999))}[d]
    a, b, m = rng.randint(*a_rng), rng.randint(*b_rng), rng.randint(*m_rng)
    return f"What is {a}^{b} mod {m}?", str(pow(a, b, m)), f"print(pow({a}, {b}, {m}))"


def _modinv(rng: random.Random, d: int) -> Generated:
    m = rng.randint(*{1: (11, 97), 2: (101, 999), 3: (1001, 99999)}[d])
    while True:
        a = rng.randint(2, m - 2)
        if math.gcd(a, m) == 1:
            break
    return (f"What is the inverse of {a} mod {m}?", str(pow(a, -1, m)), f"print(pow({a}, -1, {m}))")


def _linear(rng: random.Random, d: int) -> Generated:
    head = "from fractions import Fraction\n"
    if d < 3:
        a = rng.randint(2, 9) if d == 1 else rng.randint(10, 99)
        x = rng.randint(-20, 20) if d == 1 else rng.randint(-200, 200)
        b = rng.choice([v for v in range(-99, 100) if v]) if d == 1 else rng.choice((1, -1)) * _digits(rng, 3)
        c = a * x + b
        q = f"Solve {_poly([a, b], '^')} = {c} for x."
        return q, _frac(Fraction(x)), head + f"print(Fraction({_minus(c, b)}, {a}))"
    while True:
        a, c = rng.randint(2, 30), rng.randint(2, 30)
        b, e = rng.randint(-300, 300), rng.randint(-300, 300)
        if a != c and b and e:
            break
    q = f"Solve {_poly([a, b], '^')} = {_poly([c, e], '^')} for x."
    return q, _frac(Fraction(e - b, a - c)), head + f"print(Fraction({_minus(e, b)}, {_minus(a, c)}))"


def _linear_small(rng: random.Random, d: int) -> Generated:
    """A linear equation whose working a tiny model can do without a tool (configs/math_tiny.yaml): x ≥ 0 and b > 0,
    so `c - b` never crosses zero and `x` is a quotient from the times table (d1: a ≤ 9, x ≤ 12, b ≤ 30)."""
    a_max, x_max, b_max = {1: (9, 12, 30), 2: (12, 20, 99), 3: (19, 50, 199)}[d]
    a, x, b = rng.randint(2, a_max), rng.randint(0, x_max), rng.randint(1, b_max)
    c = a * x + b
    return f"Solve {_poly([a, b], '^')} = {c} for x.", str(x), f"print(({c} - {b}) // {a})"


def _quadratic(rng: random.Random, d: int) -> Generated:
    if d < 3:
        lim = 12 if d == 1 else 60
        r1, r2 = rng.sample(range(-lim, lim + 1), 2)
        coeffs, roots = [1, -(r1 + r2), r1 * r2], (Fraction(r1), Fraction(r2))
    else:
        while True:
            p, r = rng.randint(2, 6), rng.randint(1, 6)
            q, s = rng.randint(-15, 15), rng.randint(-15, 15)
            roots = (Fraction(q, p), Fraction(s, r))
            if roots[0] != roots[1]:
                break
        coeffs = [p * r, -(p * s + q * r), q * s]  # (p*x - q) * (r*x - s), expanded
    question = f"What is the larger root of {_poly(coeffs, '^')} = 0?"
    code = f"from sympy import symbols, solve\nx = symbols('x')\nprint(max(solve({_poly(coeffs, '**')}, x)))"
    return question, _frac(max(roots)), code


def _polyeval(rng: random.Random, d: int) -> Generated:
    deg, lim = {1: (2, 9), 2: (3, 20), 3: (4, 50)}[d]
    coeffs = [rng.choice([v for v in range(-lim, lim + 1) if v])] + [rng.randint(-lim, lim) for _ in range(deg)]
    x = {1: rng.randint(10, 99), 2: rng.choice((1, -1)) * rng.randint(10, 99),
         3: rng.choice((1, -1)) * rng.randint(100, 999)}[d]
    value = sum(c * x ** (deg - i) for i, c in enumerate(coeffs))
    question = f"Evaluate {_poly(coeffs, '^')} at x = {x}."
    return question, str(value), f"x = {x}\nprint({_poly(coeffs, '**')})"


TASK_TYPES: dict[str, Callable[[random.Random, int], Generated]] = {
    "multiply": _multiply, "add": _add, "expression": _expression, "modpow": _modpow, "modinv": _modinv,
    "linear": _linear, "quadratic": _quadratic, "polyeval": _polyeval,
}
"""The default mix, by name (the order is the draw order when `task_types` is None)."""

NAMED_ONLY_TASK_TYPES: dict[str, Callable[[random.Random, int], Generated]] = {"linear_small": _linear_small}
"""Task types drawn only when `task_types` names them: adding a type to the default mix would change every pinned
task of it."""

GENERATORS = TASK_TYPES | NAMED_ONLY_TASK_TYPES
"""Every task type a `task_types` filter may name."""


# ---------------------------------------------------------------- splits, seeds, ids


def split_of_index(index: int) -> str:
    """The split whose global index range holds `index`."""
    for split, (lo, hi) in SPLIT_RANGES.items():
        if index >= lo and (hi is None or index < hi):
            return split
    raise ValueError(f"task index {index} is negative; indices start at 0 (test 0-499, valid 500-1499, "
                     f"train >= 1500)")


def split_of_question(question: str) -> str:
    """The one split a question may appear in (content-hash bucket), which makes splits disjoint."""
    bucket = int.from_bytes(hashlib.blake2b(question.encode(), digest_size=8).digest(), "big") % _BUCKETS
    return "test" if bucket == 0 else "valid" if bucket == 1 else "train"


def _seed(split: str, index: int, attempt: int) -> int:
    # A task's identity, pinned since the first release (held-out sets depend on it), so it keeps its own key
    # form rather than `derive_seed`'s: changing it would silently replace every evaluation set.
    key = f"alprl-tir/{split}/{index}/{attempt}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def _check_args(split: str, index: int, difficulty: int | None,
                task_types: Sequence[str] | None) -> tuple[str, ...]:
    if split not in SPLIT_RANGES:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLIT_RANGES)}")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(f"task index must be an int, got {index!r}")
    if split_of_index(index) != split:
        lo, hi = SPLIT_RANGES[split]
        span = f"{lo}-{hi - 1}" if hi is not None else f">= {lo}"
        raise ValueError(f"task index {index} is not in split {split!r} (its indices are {span}); "
                         f"pass an index from that range or split={split_of_index(index)!r}")
    if difficulty is not None and difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES} or None, got {difficulty!r}")
    types = tuple(TASK_TYPES) if not task_types else tuple(task_types)
    unknown = [t for t in types if t not in GENERATORS]
    if unknown:
        raise ValueError(f"unknown task type(s) {unknown}; valid task types: {', '.join(GENERATORS)}")
    return types


def make_task_id(split: str, index: int, difficulty: int | None = None,
                 task_types: Sequence[str] | None = None) -> str:
    """`tir/<split>/<index>` plus `/d<k>` and `/t<type+type>` when filters are set; see `task_from_id`."""
    parts = ["tir", split, str(index)]
    if difficulty is not None:
        parts.append(f"d{difficulty}")
    if task_types:
        parts.append("t" + "+".join(task_types))
    return "/".join(parts)


def parse_task_id(task_id: str) -> tuple[str, int, int | None, tuple[str, ...] | None]:
    """Inverse of `make_task_id`: (split, index, difficulty, task_types)."""
    parts = str(task_id).split("/")
    try:
        if len(parts) < 3 or parts[0] != "tir":
            raise ValueError
        split, index = parts[1], int(parts[2])
        difficulty, types = None, None
        for extra in parts[3:]:
            if extra.startswith("d"):
                difficulty = int(extra[1:])
            elif extra.startswith("t") and len(extra) > 1:
                types = tuple(extra[1:].split("+"))
            else:
                raise ValueError
    except ValueError:
        raise ValueError(f"malformed TIR task id {task_id!r}; expected 'tir/<split>/<index>[/d<1-3>][/t<type+...>]'"
                         ", e.g. 'tir/test/17'") from None
    return split, index, difficulty, types


def generate_task(split: str, index: int, *, difficulty: int | None = None,
                  task_types: Sequence[str] | None = None) -> TIRTask:
    """The task at global `index` of `split` (filters: one difficulty, a subset of task types)."""
    types = _check_args(split, index, difficulty, task_types)
    for attempt in range(_MAX_ATTEMPTS):
        rng = random.Random(_seed(split, index, attempt))
        task_type = rng.choice(types)
        level = difficulty if difficulty is not None else rng.choice(DIFFICULTIES)
        question, answer, code = GENERATORS[task_type](rng, level)
        if split_of_question(question) == split:
            task_id = make_task_id(split, index, difficulty, tuple(task_types) if task_types else None)
            return TIRTask(task_id, task_type, level, question, answer, code)
    raise RuntimeError(f"no {split} question found for index {index} after {_MAX_ATTEMPTS} draws "
                       f"(task types {types}, difficulty {difficulty}): the filter leaves too few questions")


def task_from_id(task_id: str) -> TIRTask:
    """Rebuild a task from its id (`make_task_id`)."""
    split, index, difficulty, types = parse_task_id(task_id)
    return generate_task(split, index, difficulty=difficulty, task_types=types)
