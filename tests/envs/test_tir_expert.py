"""The scripted TIR expert: its episodes win in the real env, and its imperfect variants are wrong on purpose."""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from envs.tir.expert import expert_turns, guess_without_tool
from envs.tir.grading import extract_boxed, grade
from envs.tir.styles import STYLES
from envs.tir.tasks import TASK_TYPES, generate_task

STYLE_NAMES = list(STYLES)


def mix(**changes) -> dict:
    """The expert's `sft.*` keywords: a perfect expert (no skipped tool, no miscopy, varied phrasing), `changes`
    applied."""
    return {"p_skip_tool": 0.0, "p_wrong_copy": 0.0, "varied_phrasing": True, **changes}


def play(env, task, turns) -> tuple[float, int, bool]:
    """Feed `turns` to `env`; returns (last reward, turns used, terminated)."""
    env.reset(seed=0, options={"task_id": task.task_id})
    for used, turn in enumerate(turns, start=1):
        _, reward, terminated, truncated, _ = env.step(turn)
        if terminated or truncated:
            return reward, used, terminated
    return 0.0, len(turns), False


def test_expert_episodes_win_in_the_real_env_for_300_seeds_all_types_and_styles():
    cases = [(generate_task("train", 1500 + i), STYLE_NAMES[i % 3]) for i in range(300)]

    def lane(r: int) -> list[tuple[int, tuple]]:
        """Worker r plays cases r, r+4, ... on its own envs (an env is never stepped by two threads)."""
        lane_envs = {name: gym.make("alprl/TIRMath-v0", style=name).unwrapped for name in STYLE_NAMES}
        out = []
        for k in range(r, len(cases), 4):
            task, style = cases[k]
            turns = expert_turns(task, style, rng=random.Random(k), **mix())
            out.append((k, play(lane_envs[style], task, turns)))
        return out

    with ThreadPoolExecutor(max_workers=4) as pool:  # threads: grading runs off the main thread too
        results = dict(kv for lane_result in pool.map(lane, range(4)) for kv in lane_result)
    failures = [(cases[k], res) for k, res in sorted(results.items()) if res != (1.0, 2, True)]
    assert len(results) == 300 and not failures, failures[:3]
    assert {(task.task_type, style) for task, style in cases} == {(t, s) for t in TASK_TYPES for s in STYLE_NAMES}


@pytest.mark.parametrize("style", STYLE_NAMES)
def test_turn_shapes_are_short_and_end_where_the_engine_stops(style):
    for i in range(200):
        task = generate_task("train", 2000 + i)
        first, last = expert_turns(task, style, rng=random.Random(i), **mix())
        assert any(first.endswith(stop) for stop in STYLES[style].stop_strings)
        assert len(first) - len(task.solution_code) < 120
        assert task.solution_code in first or style == "hermes"
        assert extract_boxed(last) == task.answer and len(last) < 40 + len(task.answer)
        assert first.split("\n", 1)[0].endswith(".")  # one short sentence, then the tool call


def test_skip_tool_guesses_are_plausible_but_wrong():
    for i in range(400):
        task = generate_task("train", 3000 + i)
        (turn,) = expert_turns(task, rng=random.Random(i), **mix(p_skip_tool=1.0))
        guess = extract_boxed(turn)
        assert guess is not None and not grade(guess, task.answer), (task, guess)
        if task.task_type == "multiply":  # an estimate or a slip keeps the order of magnitude
            assert 0.1 < float(guess) / float(task.answer) < 10


def test_wrong_copies_run_the_tool_then_miscopy():
    for i in range(400):
        task = generate_task("train", 4000 + i)
        first, last = expert_turns(task, "torl", rng=random.Random(i), **mix(p_wrong_copy=1.0))
        copied = extract_boxed(last)
        assert task.solution_code in first and copied != task.answer and not grade(copied, task.answer)
        assert abs(len(copied) - len(task.answer)) <= 1  # one digit dropped or changed


def test_imperfect_episodes_lose_in_the_env():
    env = gym.make("alprl/TIRMath-v0").unwrapped
    for i in range(6):
        task = generate_task("train", 5000 + i, task_types=["multiply", "modpow", "linear"])
        skip = expert_turns(task, rng=random.Random(i), **mix(p_skip_tool=1.0))
        assert play(env, task, skip) == (0.0, 1, True)
        wrong = expert_turns(task, rng=random.Random(i), **mix(p_wrong_copy=1.0))
        assert play(env, task, wrong) == (0.0, 2, True)


def test_imperfection_rates_follow_the_probabilities():
    task = generate_task("test", 0)
    rng = random.Random(0)
    kinds = Counter()
    for _ in range(2000):
        turns = expert_turns(task, rng=rng, **mix(p_skip_tool=0.2, p_wrong_copy=0.25))
        kinds["skip" if len(turns) == 1 else "wrong" if extract_boxed(turns[-1]) != task.answer else "ok"] += 1
    assert 340 < kinds["skip"] < 460          # 0.2 * 2000 = 400
    assert 340 < kinds["wrong"] < 460         # 0.8 * 0.25 * 2000 = 400
    assert kinds["ok"] == 2000 - kinds["skip"] - kinds["wrong"]


def test_without_rng_the_turns_are_a_function_of_the_task():
    task = generate_task("valid", 900)
    assert expert_turns(task, "hermes", **mix()) == expert_turns(task, "hermes", **mix())
    assert expert_turns(task, **mix(p_skip_tool=0.5)) == expert_turns(task, **mix(p_skip_tool=0.5))


def test_bad_arguments():
    task = generate_task("test", 1)
    with pytest.raises(ValueError, match="p_skip_tool"):
        expert_turns(task, **mix(p_skip_tool=1.5))
    with pytest.raises(ValueError, match="valid styles"):
        expert_turns(task, "chatml", **mix())


def test_fraction_guesses_are_one_decimal_approximations():
    assert guess_without_tool("45/7", random.Random(0)) == "6.4"
    assert guess_without_tool("3/2", random.Random(0)) != "1.5"  # an exact decimal would be right: slip instead
