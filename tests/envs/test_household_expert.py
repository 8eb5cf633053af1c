"""Household experts: the oracle wins every generated task (1,000 per task type), the imperfect one is imperfect."""

from __future__ import annotations

import random

import numpy as np
import pytest

from envs.household import TASK_TYPES, HouseholdEnv, expert_action


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_oracle_wins_1000_tasks_per_type(task_type):
    env = HouseholdEnv(expert=True)
    lengths = []
    for k in range(1000):
        _, info = env.reset(options={"task_id": k, "task_type": task_type})
        plan = info["expert_plan"]
        assert 1 <= len(plan) <= 13, plan
        for cmd in plan:
            assert cmd in info["admissible_commands"]
            _, reward, term, trunc, info = env.step(cmd)
        assert info["won"] and term and not trunc and reward == 1.0, (k, plan)
        lengths.append(len(plan))
    assert max(lengths) <= 13


def test_expert_action_replans_after_deviation():
    env = HouseholdEnv(expert=True)
    for k in range(100):
        _, info = env.reset(options={"task_id": k, "split": "test"})
        assert expert_action(env) == info["expert_plan"][0]
        env.step("inventory")  # a deviation: the plan is recomputed from the state
        env.step("go to " + env.world.r_name[-1])
        for _ in range(30):
            _, _, term, _, info = env.step(expert_action(env))
            if term:
                break
        assert info["won"] and info["expert_plan"] == []


def test_imperfect_expert_explores_and_errs():
    env = HouseholdEnv()
    rng = random.Random(0)
    oracle_steps, searcher_steps, wins = [], [], 0
    for k in range(120):
        for privileged, bucket in ((True, oracle_steps), (False, searcher_steps)):
            env.reset(options={"task_id": k, "split": "valid"})
            for _ in range(50):
                _, _, term, trunc, info = env.step(expert_action(env, rng, epsilon=0.0, privileged=privileged))
                if term or trunc:
                    break
            bucket.append(info["step"])
            wins += info["won"] and not privileged
    assert wins == 120  # the searcher still succeeds without epsilon...
    assert np.mean(searcher_steps) > np.mean(oracle_steps) + 2  # ...but has to look around
    # epsilon-random admissible actions: a numpy Generator works as rng too
    gen = np.random.default_rng(0)
    env.reset(options={"task_id": 0, "split": "valid"})
    actions = {expert_action(env, gen, epsilon=1.0) for _ in range(50)}
    assert len(actions) > 3 and actions <= set(env._info(False)["admissible_commands"])


def test_expert_action_requires_rng_when_random():
    env = HouseholdEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="pass rng"):
        expert_action(env, epsilon=0.1)
    with pytest.raises(ValueError, match="pass rng"):
        expert_action(env, privileged=False)


def test_ordered_search_visits_hosts_in_id_order_and_wins():
    """search="ordered": the unseen receptacles are tried in (type, index) order, the same plan whatever the rng."""
    env = HouseholdEnv()
    for k in range(60):
        plans = []
        for seed in (0, 1):
            env.reset(options={"task_id": k, "split": "valid"})
            rng, plan = random.Random(seed), []
            for _ in range(50):
                plan.append(expert_action(env, rng, privileged=False, search="ordered"))
                _, _, term, trunc, info = env.step(plan[-1])
                if term or trunc:
                    break
            assert info["won"], (k, plan)
            plans.append(plan)
        assert plans[0] == plans[1]
        until_found = plans[0][: next(i for i, c in enumerate(plans[0]) if c.startswith("take "))]
        searched = [env.world.r_name.index(c[len("go to "):]) for c in until_found if c.startswith("go to ")]
        assert searched == sorted(searched)
    with pytest.raises(ValueError, match="search='spiral'"):
        expert_action(env, random.Random(0), privileged=False, search="spiral")
