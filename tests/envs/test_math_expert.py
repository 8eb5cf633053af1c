"""The single-turn expert (`alprl/Math-v0`): its working is right, its replies win in the real env, and its
imperfect replies are wrong exactly as often as its settings say."""

from __future__ import annotations

import random
import re
import statistics

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers alprl/Math-v0)
from envs.boxed import extract_boxed
from envs.tir.expert import single_turn_reply
from envs.tir.tasks import DIFFICULTIES, GENERATORS, TIRTask, generate_task
from envs.tir.working import _value, working_line


def task(task_type: str, question: str, answer: str) -> TIRTask:
    return TIRTask("hand", task_type, 1, question, answer, "")


def mix(**changes) -> dict:
    """The expert's `sft.*` keywords: a perfect expert (no skipped tool, no miscopy, varied phrasing), `changes`
    applied."""
    return {"p_skip_tool": 0.0, "p_wrong_copy": 0.0, "varied_phrasing": True, **changes}


@pytest.mark.parametrize(("task_type", "question", "answer", "working"), [
    ("multiply", "Compute 482 * 937.", "451634", "482 * 937 = 451634"),
    ("expression", "Compute (482 + 937) * 61.", "86559", "(482 + 937) * 61 = 1419 * 61 = 86559"),  # 1419 * 61
    ("expression", "Compute 5 * (3 - 9) + 2.", "-28", "5 * (3 - 9) + 2 = 5 * (-6) + 2 = -28"),
    ("modpow", "What is 7^123 mod 97?", "37", "7^123 mod 97 = 37"),
    ("modinv", "What is the inverse of 17 mod 101?", "6", "17 * 6 = 102 = 1 * 101 + 1, so the inverse is 6"),
    ("linear", "Solve 3*x + 17 = 62 for x.", "15", "3*x = 62 - 17 = 45, so x = 45/3 = 15"),
    ("linear", "Solve 7*x - 82 = -89 for x.", "-1", "7*x = -89 + 82 = -7, so x = -7/7 = -1"),
    ("linear_small", "Solve 7*x + 12 = 68 for x.", "8", "7*x = 68 - 12 = 56, so x = 56/7 = 8"),
    # x on both sides: (25 - 29) x = 272 + 139, x = 411 / -4
    ("linear", "Solve 25*x - 139 = 29*x + 272 for x.", "-411/4",
     "(25 - 29)*x = -4*x = 272 + 139 = 411, so x = 411/(-4) = -411/4"),
    ("quadratic", "What is the larger root of x^2 - 5*x - 14 = 0?", "7",
     "x^2 - 5*x - 14 = (x - 7)*(x + 2), so the roots are 7 and -2"),  # the roots sum to 5
    ("quadratic", "What is the larger root of x^2 - 3*x = 0?", "3", "x^2 - 3*x = (x - 3)*x, so the roots are 3 and 0"),
    ("quadratic", "What is the larger root of 6*x^2 - 5*x - 6 = 0?", "3/2",  # (2x - 3)(3x + 2); 5/6 - 3/2 = -2/3
     "The roots of 6*x^2 - 5*x - 6 = 0 are 3/2 and -2/3"),
    # 3 * 23^2 = 1587, 7 * 23 = 161
    ("polyeval", "Evaluate 3*x^2 - 7*x + 12 at x = 23.", "1438", "3*23^2 - 7*23 + 12 = 1587 - 161 + 12 = 1438"),
    ("polyeval", "Evaluate -x^2 + 4 at x = -3.", "-5", "-(-3)^2 + 4 = -9 + 4 = -5"),
])
def test_working_lines_by_hand(task_type, question, answer, working):
    assert working_line(task(task_type, question, answer)) == working


def test_every_generated_working_ends_in_the_gold_and_its_sums_hold():
    """All types and difficulties: the line ends in the gold answer, and in the lines that are chains of
    integer expressions (Compute, Evaluate) every link has the same value."""
    for i in range(400):
        t = generate_task("train", 1500 + i, difficulty=DIFFICULTIES[i % 3], task_types=[list(GENERATORS)[i % len(GENERATORS)]])
        line = working_line(t)
        assert re.search(rf"(= | is | and ){re.escape(t.answer)}$|are {re.escape(t.answer)} and ", line), line
        if t.task_type in ("multiply", "add", "expression", "polyeval"):
            assert {_value(side) for side in line.split(" = ")} == {int(t.answer)}, line


def test_dataset_problems_have_no_working():
    with pytest.raises(ValueError, match="no working for task type 'math500'.*generated tasks only"):
        working_line(task("math500", "What is 1+1?", "2"))


def test_expert_replies_win_in_the_real_env_for_every_type():
    env = gym.make("alprl/Math-v0").unwrapped
    for i in range(240):
        t = generate_task("train", 3000 + i, difficulty=DIFFICULTIES[i % 3], task_types=[list(GENERATORS)[i % len(GENERATORS)]])
        obs, _ = env.reset(options={"task_id": t.task_id})
        reply = single_turn_reply(t, rng=random.Random(i), **mix())
        _, reward, terminated, truncated, info = env.step(reply)
        assert obs == t.question and (reward, terminated, truncated) == (1.0, True, False), (t, reply)
        assert info["extracted_answer"] == t.answer and reply.count("\\boxed{") == 1
        assert reply.endswith("}.") and len(reply) < 200 + 4 * len(t.answer)


def test_imperfect_replies_lose_as_often_as_set():
    """p_skip_tool boxes a guess without the working, p_wrong_copy miscopies the worked result: both always
    wrong, so the env grades (1 - 0.35)(1 - 0.1) = 58.5% of replies correct."""
    env = gym.make("alprl/Math-v0", task_types=["linear"], difficulty=1).unwrapped
    rewards, kinds = [], []
    for i in range(400):
        obs, _ = env.reset(options={"split": "train", "index": 1500 + i})
        t = generate_task("train", 1500 + i, difficulty=1, task_types=["linear"])
        reply = single_turn_reply(t, rng=random.Random(i), p_skip_tool=0.35, p_wrong_copy=0.1, varied_phrasing=False)
        rewards.append(env.step(reply)[1])
        worked = "\n" in reply
        kinds.append("skip" if not worked else "right" if extract_boxed(reply) == t.answer else "miscopy")
        assert (rewards[-1] == 1.0) == (kinds[-1] == "right"), reply
    share = {k: kinds.count(k) / len(kinds) for k in ("skip", "miscopy", "right")}
    # binomial standard deviations over 400 draws: 0.024 (skip), 0.015 (miscopy), 0.025 (right)
    assert abs(share["skip"] - 0.35) < 0.08 and abs(share["miscopy"] - 0.65 * 0.1) < 0.05
    assert abs(statistics.fmean(rewards) - 0.585) < 0.08


def test_fixed_phrasing_and_bad_probabilities():
    t = generate_task("train", 1600, task_types=["linear"], difficulty=1)
    replies = {single_turn_reply(t, rng=random.Random(i), **mix(varied_phrasing=False)) for i in range(20)}
    assert replies == {f"{working_line(t)}.\nThe answer is \\boxed{{{t.answer}}}."}
    assert single_turn_reply(t, **mix()) == single_turn_reply(t, **mix())  # rng=None: seeded from the task id
    with pytest.raises(ValueError, match="p_wrong_copy must be a probability"):
        single_turn_reply(t, **mix(p_wrong_copy=1.5))
