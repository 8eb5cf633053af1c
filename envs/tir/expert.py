"""Scripted math solvers for SFT data (reference/environments.md §5, "TIR" and "Imperfect experts").

TIR (`alprl/TIRMath-v0`, `expert_turns`): a successful episode is two assistant turns: a short sentence plus the
task's `solution_code` as a tool call ending exactly at the style's stop string; then, after the tool output, a
short sentence with `\\boxed{answer}`. The answer turn copies the tool output, which for generated tasks is the
gold answer (tests run the code through the real env to prove it).

Imperfections (so the SFT policy leaves headroom for RL):
- `p_skip_tool`: answer at once without the tool, with a plausible wrong guess (an estimate rounded to two
  significant digits, or a digit slip; fractions become a one-decimal approximation). Always wrong.
- `p_wrong_copy`: run the tool, then copy its result wrongly (drop or change one digit). Always wrong.

Single turn (`alprl/Math-v0`, `single_turn_reply`): no tool, so the one reply is a line of working
(`envs.tir.working.working_line`: the problem broken into steps, ending in the gold answer), then the same answer
sentence with `\\boxed{answer}`. The same two imperfections, read for a reply without a tool:
- `p_skip_tool`: skip the working and box a guess at once (`guess_without_tool`). Always wrong.
- `p_wrong_copy`: work it out, then copy the result into the box wrongly. Always wrong.
"""

from __future__ import annotations

import random
from fractions import Fraction

from envs.splits import derive_seed
from envs.tir.styles import get_style
from envs.tir.tasks import TIRTask
from envs.tir.working import working_line
from envs.tir_defaults import DEFAULT_STYLE

THOUGHTS = ("I will compute it with Python.", "The tool printed the result: I copy it.")
"""`with_thinking`'s thought before a tool call and before an answer after a tool's output."""
CODE_SENTENCES = ("Let me compute this with Python.", "I will use Python.", "Let me run the code.")
ANSWER_SENTENCES = ("The answer is \\boxed{%s}.", "So the answer is \\boxed{%s}.")


def expert_code_turn(task: TIRTask, style: str = DEFAULT_STYLE, rng: random.Random | None = None) -> str:
    """Turn 1: a sentence and the tool call for `task.solution_code`, ending at the style's stop string.

    `rng=None` always uses the first sentence (fixed phrasing)."""
    sentence = rng.choice(CODE_SENTENCES) if rng is not None else CODE_SENTENCES[0]
    return f"{sentence}\n{get_style(style).format_tool_call(task.solution_code)}"


def expert_answer_turn(answer: str, rng: random.Random | None = None) -> str:
    """The final turn: a sentence with `\\boxed{answer}`."""
    template = rng.choice(ANSWER_SENTENCES) if rng is not None else ANSWER_SENTENCES[0]
    return template % answer


def _digit_slip(answer: str, rng: random.Random, *, allow_drop: bool = True) -> str:
    """Drop (if allowed) or change one digit of `answer` (an int or p/q string) so that its value changes."""
    sign = "-" if answer.startswith("-") else ""
    parts = answer.lstrip("-").split("/")
    for _ in range(100):
        k = rng.randrange(len(parts))
        digits = parts[k]
        i = rng.randrange(len(digits))
        if allow_drop and len(digits) >= 2 and rng.random() < 0.5:
            new = digits[:i] + digits[i + 1:]
        else:
            new = digits[:i] + rng.choice([d for d in "0123456789" if d != digits[i]]) + digits[i + 1:]
        if len(new) > 1 and new.startswith("0"):
            continue  # "0123" would read as a typo of a different kind
        cand = sign + "/".join(parts[:k] + [new] + parts[k + 1:])
        try:
            if Fraction(cand) != Fraction(answer):
                return cand
        except ZeroDivisionError:
            continue
    return str(Fraction(answer) + 1)  # only if 100 draws all failed; keeps the result wrong regardless


def guess_without_tool(answer: str, rng: random.Random) -> str:
    """A plausible but wrong answer, as a model that skips the tool would give."""
    value = Fraction(answer)
    if value.denominator != 1:
        guess = f"{float(value):.1f}"
        return guess if Fraction(guess) != value else _digit_slip(answer, rng, allow_drop=False)
    n = value.numerator
    if abs(n) >= 1000 and rng.random() < 0.5:
        scale = 10 ** (len(str(abs(n))) - 2)
        estimate = round(n / scale) * scale  # mental estimate: two significant digits
        if estimate != n:
            return str(estimate)
    return _digit_slip(answer, rng, allow_drop=False)  # a slip that keeps the order of magnitude


def expert_turns(task: TIRTask, style: str = DEFAULT_STYLE, *, rng: random.Random | None = None,
                 p_skip_tool: float, p_wrong_copy: float, varied_phrasing: bool) -> list[str]:
    """Assistant turn texts of one expert episode for `task` in `style` (see the module docstring).

    `p_skip_tool`, `p_wrong_copy`, `varied_phrasing`: the SFT data's mix, the config's `sft.*` keys, without
    defaults here (the config states them once); 0, 0 and True make a perfect expert.

    `rng`: source of phrasing and imperfection draws; None = a generator seeded from the task id (so the
    same task always gets the same turns). `varied_phrasing=False` always uses the first sentence of each
    kind: the copied numbers then sit at fixed distances from their source, which a tiny model learns
    to copy far sooner (the CPU demo uses it).
    """
    get_style(style)  # unknown style -> ValueError listing the valid ones
    _check_probabilities(p_skip_tool, p_wrong_copy)
    rng = rng if rng is not None else random.Random(derive_seed("tir-expert", task.task_id))
    phrasing = rng if varied_phrasing else None
    if rng.random() < p_skip_tool:
        return [expert_answer_turn(guess_without_tool(task.answer, rng), phrasing)]
    code_turn = expert_code_turn(task, style, phrasing)
    copied = _digit_slip(task.answer, rng) if rng.random() < p_wrong_copy else task.answer
    return [code_turn, expert_answer_turn(copied, phrasing)]


def single_turn_reply(task: TIRTask, *, rng: random.Random | None = None, p_skip_tool: float,
                      p_wrong_copy: float, varied_phrasing: bool) -> str:
    """The one reply of a single-turn expert episode for `task`: a line of working, then the boxed answer (see
    the module docstring). The arguments as in `expert_turns` (the draws come in the same order:
    skip, then miscopy, so one seed skips the same tasks in both envs)."""
    _check_probabilities(p_skip_tool, p_wrong_copy)
    rng = rng if rng is not None else random.Random(derive_seed("single-turn-expert", task.task_id))
    phrasing = rng if varied_phrasing else None
    if rng.random() < p_skip_tool:
        return expert_answer_turn(guess_without_tool(task.answer, rng), phrasing)
    copied = _digit_slip(task.answer, rng) if rng.random() < p_wrong_copy else task.answer
    return f"{working_line(task)}.\n{expert_answer_turn(copied, phrasing)}"


def with_thinking(turns: list[str]) -> list[str]:
    """`turns` as a thinking model writes them (`sft.expert_thinking`): each opened by a short <think> block, the
    format Qwen3, QwQ and DeepSeek-R1 share ("<think>\n...\n</think>\n\n"). A lone answer (no tool) thinks as the
    first turn would have, before guessing."""
    thoughts = [THOUGHTS[0]] + [THOUGHTS[1]] * (len(turns) - 1)
    return [f"<think>\n{thought}\n</think>\n\n{turn}" for thought, turn in zip(thoughts, turns, strict=True)]


def _check_probabilities(p_skip_tool: float, p_wrong_copy: float) -> None:
    for name, p in (("p_skip_tool", p_skip_tool), ("p_wrong_copy", p_wrong_copy)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
