"""reasoning-gym datasets as the math envs' problems (envs/datasets/reasoning_gym.py, envs/tir/problems.py).

Three generators of different kinds — basic_arithmetic (arithmetic), spell_backward (algorithmic), knights_knaves
(logic) — through both registered envs: reset on a held-out problem, reply with the right answer boxed, a wrong
one and a partly right one; the env's reward must equal reasoning-gym's own scorer (`get_score_answer_fn`, a fresh
instance, not the env's) on the same boxed text and the same entry. Then Gymnasium's checker and hostile replies on
both envs, the splits (disjoint by seed range and by question, even where questions repeat), a name unknown to
reasoning-gym (one line with the near matches), and a scorer that misbehaves.
"""

from __future__ import annotations

import math
import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from rg_answers import partly_right

pytest.importorskip("reasoning_gym", reason="reasoning-gym not installed (the rg extra)")

import reasoning_gym  # noqa: E402

import envs  # noqa: E402, F401  (registers the alprl/* envs)
from envs.datasets import reasoning_gym as rg  # noqa: E402
from envs.tir.problems import ProblemSource  # noqa: E402
from trainer.config.errors import ConfigError  # noqa: E402
from trainer.setup.build import build_config  # noqa: E402

KINDS = ("basic_arithmetic", "spell_backward", "knights_knaves")
SOURCE = "reasoning_gym:" + ",".join(KINDS)
OPTIONS = {"size": 12, "eval_size": 4, "seed": 3}


def replies(name: str, entry: dict) -> dict[str, str]:
    return {"right": entry["answer"], "partly": partly_right(name, entry), "wrong": "I give up"}


@pytest.mark.parametrize("env_id", ["alprl/Math-v0", "alprl/TIRMath-v0"])
def test_the_reward_is_reasoning_gyms_own_score_of_the_boxed_answer(env_id):
    env = gym.make(env_id, dataset=SOURCE, reasoning_gym=OPTIONS).unwrapped
    problems = rg.load_split(SOURCE, "test", OPTIONS)
    assert env.problems.size("test") == 3 * OPTIONS["eval_size"] == len(problems)
    seen = {name: set() for name in KINDS}
    for index, problem in enumerate(problems[:6]):  # round-robin: each kind twice
        scorer = reasoning_gym.get_score_answer_fn(problem.name)
        for how, answer in replies(problem.name, problem.entry).items():
            obs, info = env.reset(seed=index, options={"split": "test", "index": index})
            assert obs == problem.question and info["task_type"] == problem.name
            _, reward, terminated, truncated, info = env.step(f"Thinking done.\n\\boxed{{{answer}}}")
            expected = scorer(answer, problem.entry)
            assert (reward, info["task_score"]) == (expected, expected), (problem.name, how, answer)
            assert terminated and not truncated and info["extracted_answer"] == answer
            assert info["won"] == (expected == 1.0)
            seen[problem.name].add(how if how != "partly" or 0 < expected < 1 else "partly-none")
        _, info = env.reset(options={"task_id": problem.id})  # ids find their problem again
        assert info["task_id"] == problem.id
    env.close()
    assert all({"right", "wrong"} <= s for s in seen.values()) and "right" in seen["knights_knaves"]
    assert "partly" in seen["spell_backward"] and "partly" in seen["knights_knaves"]  # partial credit reached


@pytest.mark.parametrize("env_id", ["alprl/Math-v0", "alprl/TIRMath-v0"])
def test_the_envs_on_reasoning_gym_pass_the_checker_and_take_any_text(env_id):
    env = gym.make(env_id, dataset=SOURCE, reasoning_gym=OPTIONS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert not [str(w.message) for w in caught if "render fps" not in str(w.message)]
    for garbage in ["", "\\boxed{", "\\boxed{\ud800}", "\\boxed{" + "9" * 100_000 + "}", "\\boxed{}{" * 50]:
        env.reset(seed=1)
        _, reward, _, _, info = env.step(garbage)
        assert type(reward) is float and math.isfinite(reward) and 0.0 <= reward <= 1.0
        pickle.dumps(info)
    env.close()


def test_a_tool_turn_then_an_answer_is_scored_by_reasoning_gym():
    env = gym.make("alprl/TIRMath-v0", dataset="reasoning_gym:spell_backward", reasoning_gym=OPTIONS).unwrapped
    problem = rg.load_split("reasoning_gym:spell_backward", "test", OPTIONS)[0]
    word = problem.entry["answer"][::-1]
    env.reset(options={"split": "test", "index": 0})
    obs, reward, terminated, _, info = env.step(f"Let me reverse it.\n```python\nprint({word!r}[::-1])\n```\n")
    assert problem.entry["answer"] in obs and reward == 0.0 and not terminated and info["num_tool_calls"] == 1
    _, reward, terminated, _, info = env.step(f"So the answer is \\boxed{{{problem.entry['answer']}}}.")
    assert terminated and reward == 1.0 and info["won"]
    env.close()


def test_a_reply_without_a_box_is_scored_as_no_answer():
    env = gym.make("alprl/Math-v0", dataset="reasoning_gym:knights_knaves", reasoning_gym=OPTIONS).unwrapped
    problem = rg.load_split("reasoning_gym:knights_knaves", "test", OPTIONS)[1]
    env.reset(options={"split": "test", "index": 1})
    _, reward, _, _, info = env.step(problem.entry["answer"])  # right, but not boxed
    assert reward == reasoning_gym.get_score_answer_fn("knights_knaves")(None, problem.entry) == 0.0
    assert info["extracted_answer"] == "" and not info["won"]


def test_splits_are_disjoint_by_question_even_where_a_generator_repeats_itself():
    # one-digit sums: a few hundred questions, so 300 train draws repeat and would hit the held-out ones
    small = {"size": 300, "eval_size": 30, "seed": 0,
             "config": {"basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
                                             "operators": ["+"]}}}
    source = ProblemSource(dataset="reasoning_gym:basic_arithmetic", reasoning_gym=small)
    train, test, valid = (source.split(s).tasks for s in ("train", "test", "valid"))
    questions = {name: [t.question for t in tasks] for name, tasks in (("train", train), ("test", test),
                                                                       ("valid", valid))}
    assert (len(train), len(test), len(valid)) == (300, 30, 30)
    assert len(set(questions["train"])) < 300  # the generator repeats itself...
    assert not set(questions["train"]) & set(questions["test"])  # ...and still no held-out question is trained on
    assert not set(questions["valid"]) & (set(questions["train"]) | set(questions["test"]))
    assert len(set(questions["test"])) == 30 and len(set(questions["valid"])) == 30
    # the seed ranges themselves are disjoint: each entry remembers the seed it was drawn from
    seeds = {s: {p.dataset.seed for p in rg.dataset_split("basic_arithmetic", s, rg.RGOptions.of(small))}
             for s in ("train", "test", "valid")}
    assert all(len(v) == 1 for v in seeds.values())  # one dataset object per split...
    starts = sorted(next(iter(v)) for v in seeds.values())  # ...whose ranges of 2^29 seeds cannot meet
    assert all(b - a >= rg.MAX_DRAWS for a, b in zip(starts, starts[1:], strict=False))
    assert starts[-1] + rg.MAX_DRAWS <= 2**32


def test_a_datasets_problems_do_not_depend_on_the_names_listed_with_it():
    alone = rg.load_split("reasoning_gym:spell_backward", "train", OPTIONS)
    mixed = rg.load_split("reasoning_gym:basic_arithmetic,spell_backward", "train", OPTIONS)
    assert mixed[1::2] == alone and [p.name for p in mixed[:2]] == ["basic_arithmetic", "spell_backward"]
    other_seed = rg.load_split("reasoning_gym:spell_backward", "train", {**OPTIONS, "seed": 4})
    assert [p.question for p in other_seed] != [p.question for p in alone]


def test_per_dataset_config_and_size_reach_reasoning_gym():
    options = {**OPTIONS, "config": {"basic_arithmetic": {"size": 5, "min_terms": 4, "max_terms": 4}}}
    problems = rg.load_split("reasoning_gym:basic_arithmetic", "train", options)
    assert len(problems) == 5 and all(p.entry["metadata"]["num_terms"] == 4 for p in problems)


def test_an_unknown_name_is_one_line_listing_the_near_matches():
    with pytest.raises(rg.ReasoningGymError) as info:
        gym.make("alprl/Math-v0", dataset="reasoning_gym:basic_arithmetc,spell_backward")
    message = str(info.value)
    assert "\n" not in message and "unknown reasoning-gym dataset 'basic_arithmetc'" in message
    assert "near matches: basic_arithmetic" in message
    with pytest.raises(ConfigError) as info:
        build_config(None, ["env.id=alprl/Math-v0", "env.dataset=reasoning_gym:knight_knaves"])
    assert "\n" not in str(info.value) and str(info.value).startswith("env.dataset='reasoning_gym:knight_knaves': ")
    assert "near matches: knights_knaves" in str(info.value)
    with pytest.raises(ConfigError, match=r"reasoning_gym.config.basic_arithmetic.max_termz: .*valid: .*max_terms"):
        build_config(None, ["env.dataset=reasoning_gym:basic_arithmetic",
                            "env.reasoning_gym.config.basic_arithmetic.max_termz=3"])
    with pytest.raises(ConfigError, match=r"refuses .*max_terms must be >= min_terms"):  # reasoning-gym's own check
        build_config(None, ["env.dataset=reasoning_gym:basic_arithmetic", "env.reasoning_gym.eval_size=200",
                            "env.reasoning_gym.config.basic_arithmetic.min_terms=9"])


class Raising:
    def score_answer(self, answer, entry):
        raise KeyError("metadata")


class Generous:
    def score_answer(self, answer, entry):
        return float("nan") if answer == "nan" else 7.0


def test_a_scorer_that_raises_or_strays_scores_within_zero_and_one():
    entry = {"question": "q", "answer": "a", "metadata": {}}
    assert rg.RGProblem("i", "n", "q", "a", entry, Raising()).score("a") == 0.0
    generous = rg.RGProblem("i", "n", "q", "a", entry, Generous())
    assert generous.score("a") == 1.0 and generous.score("nan") == 0.0
    assert generous.score("a" * (rg.MAX_ANSWER_CHARS + 1)) == 0.0  # never handed to the scorer
