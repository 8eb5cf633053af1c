"""Checks every registered `alprl/*` environment (reference/environments.md §0.4; style.md rule 7).

Parametrized over the Gymnasium registry, so an env registered later in `envs/__init__.py` is checked
automatically: `check_env` (built via `gym.make`, so render and close checks run), seeded determinism of
obs, rewards, flags and info, garbage actions tolerated, finite float rewards, bool flags, §0.3 info keys,
picklable infos, observations inside the space, idempotent close, and 200 random-action episodes.
"""

from __future__ import annotations

import math
import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import envs  # noqa: F401  (registers every alprl/* id)

# The adapters to the real ALFWorld and WebShop run on stand-ins here (the `make` fixture, tests/envs/conftest.py).
ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("alprl/"))
INFO_KEYS = {"admissible_commands", "won", "task_score", "task_id", "task_type", "step", "invalid_action"}
GARBAGE = ["", " ", "\n\n", "\x00", "\ud800", "é€😀", "}{" * 50, "```python\n", "\\boxed{", "<tool_call>{",
           "click[", "search[]", "go to", "x" * 100_000, "\t" * 1000]
# A text env has no frame rate; Gymnasium warns about a missing render_fps for every env, so it is not a finding.
BENIGN_WARNINGS = ("render fps",)
MAX_STEPS = 1000  # far above every env's own limit: an episode that reaches it never ends


def test_the_registry_holds_the_tir_env():
    assert "alprl/TIRMath-v0" in ENV_IDS
    for env_id in ENV_IDS:
        assert gym.spec(env_id).max_episode_steps is None  # each env enforces its own step limit


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes_without_warnings(env_id, make):
    env = make(env_id)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    found = [str(w.message) for w in caught if not any(b in str(w.message) for b in BENIGN_WARNINGS)]
    assert not found, found
    env.close()


def check_step(env: gym.Env, result: tuple) -> None:
    obs, reward, terminated, truncated, info = result
    assert obs in env.observation_space, obs[:200]
    assert type(reward) is float and math.isfinite(reward)
    assert type(terminated) is bool and type(truncated) is bool
    assert INFO_KEYS <= set(info), INFO_KEYS - set(info)
    assert type(info["won"]) is bool and type(info["invalid_action"]) is bool
    assert isinstance(info["admissible_commands"], list)
    pickle.dumps(info)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_episodes_are_identical_including_info(env_id, make):
    runs = []
    for _ in range(2):
        env = make(env_id)
        env.action_space.seed(5)
        trace = [env.reset(seed=11)]
        for _ in range(5):
            step = env.step(env.action_space.sample())
            trace.append(step)
            if step[2] or step[3]:
                break
        runs.append(trace)
        env.close()
    assert data_equivalence(runs[0], runs[1], exact=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_garbage_actions_are_tolerated(env_id, make):
    env = make(env_id)
    for seed, action in enumerate(GARBAGE + [None, 3, b"bytes"]):
        obs, info = env.reset(seed=seed)
        assert obs in env.observation_space and INFO_KEYS <= set(info)
        check_step(env, env.step(action))  # type: ignore[arg-type]
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_close_is_idempotent(env_id, make):
    env = make(env_id, unwrapped=False)
    env.reset(seed=0)
    env.close()
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_200_random_action_episodes(env_id, make):
    env = make(env_id)
    env.action_space.seed(0)
    for episode in range(200):
        obs, info = env.reset(seed=episode)
        assert obs in env.observation_space
        for _ in range(MAX_STEPS):
            result = env.step(env.action_space.sample())
            check_step(env, result)
            if result[2] or result[3]:
                break
        else:
            pytest.fail(f"{env_id}: episode {episode} did not end within {MAX_STEPS} steps")
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_global_index_option_is_accepted_everywhere(env_id, make):
    """Every alprl env takes `options={"split", "index"}` (global index), the form evaluation uses."""
    env = make(env_id, unwrapped=False)
    try:
        obs_a, info_a = env.reset(seed=0, options={"split": "test", "index": 3})
        obs_b, info_b = env.reset(seed=0, options={"split": "test", "index": 3})
        _, info_c = env.reset(seed=0, options={"split": "test", "index": 4})
        assert obs_a == obs_b and info_a["task_id"] == info_b["task_id"]
        assert info_a["task_id"] != info_c["task_id"]
    finally:
        env.close()
