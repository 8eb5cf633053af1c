"""The rollout records each turn's span of response positions and the state key of the observation it acted on
(`Trajectory.turn_spans`, `Trajectory.turn_states`), for step-level advantages (trainer/objective/gigpo.py).

Stand-ins: a scripted engine (two tokens a turn) and an env whose observations differ only in whitespace, so
the keys are checked to collapse it; the real agents' formatting is not needed for what is recorded.
"""

from __future__ import annotations

from concurrent.futures import Future

import gymnasium as gym

from agents.engines.base import GenerationResult
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from agents.trajectory import state_key

OBSERVATIONS = ["You see\n  a box.", "You see a box.", "The box is open."]


class ScriptedEngine:
    concurrent_callers = False
    overlap_episodes = False
    max_model_len = 10_000

    def submit(self, requests, *, greedy=False, seed=None):
        futures = []
        for _ in requests:
            future: Future = Future()
            future.set_result(GenerationResult([7, 8], [-0.5, -0.25], "stop"))
            futures.append(future)
        return futures


class WordAgent:
    """One token per word of an observation."""

    def stop_strings(self, num_tool_calls):
        return ["\n"]

    def prompt_ids(self, first_obs, info):
        return [1, 2, 3]

    def observation_ids(self, obs):
        return [5] * len(obs.split())

    def decode(self, token_ids):
        return "look"

    def end_of_turn_ids(self):
        return [9]

    def ended_turn_action(self, text):
        return None


class Room(gym.Env):
    """Answers step k with OBSERVATIONS[k]; wins after len(OBSERVATIONS) + 1 steps."""

    def reset(self, *, seed=None, options=None):
        self.k = 0
        return "  Start\t room \n", {}

    def step(self, action):
        self.k += 1
        if self.k > len(OBSERVATIONS):
            return "done", 1.0, True, False, {"won": True}
        return OBSERVATIONS[self.k - 1], 0.0, False, False, {}


def _play(max_response_tokens):
    specs = [EpisodeSpec(seed=0, options={}, group_id=0)]
    return run_episodes(ScriptedEngine(), WordAgent(), [Room()], specs,
                        RolloutLimits(max_new_tokens=2, max_response_tokens=max_response_tokens, max_obs_tokens=64,
                                      mask_void_turns=False),
                        seed=1)[0]


def test_each_turn_records_its_span_and_the_normalized_state_it_acted_on():
    t = _play(max_response_tokens=200)
    assert t.reward == 1.0 and t.info["turns"] == 4
    # turn n: 2 sampled tokens, then the observation's 4 words (4 tokens) before turn n + 1
    assert t.turn_spans == [(0, 2), (6, 8), (12, 14), (18, 20)]
    assert all(t.loss_mask[s:e] == [1] * (e - s) for s, e in t.turn_spans)
    assert sum(t.loss_mask) == sum(e - s for s, e in t.turn_spans)  # no sampled token outside a turn
    assert t.turn_states == ["Start room", "You see a box.", "You see a box.", "The box is open."]


def test_an_observation_no_turn_acted_on_is_not_a_state():
    """The budget ends the episode after an observation: turns and states stay aligned."""
    t = _play(max_response_tokens=6)
    assert t.info["truncated"] and t.info["budget_exhausted"]
    assert t.turn_spans == [(0, 2)] and t.turn_states == ["Start room"]


def test_state_key_collapses_whitespace_only():
    assert state_key(" a\n\tb  c ") == "a b c"
    assert state_key("a b") != state_key("a  c")


class HintedRoom(Room):
    """Room whose shown observation carries agent context; `anchor_obs` in the step info names the state."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return f"{obs}\nActions: look (step {self.k})", reward, terminated, truncated, {**info, "anchor_obs": obs}


def test_a_steps_anchor_obs_is_the_state_when_the_env_gives_one():
    specs = [EpisodeSpec(seed=0, options={}, group_id=0)]
    t = run_episodes(ScriptedEngine(), WordAgent(), [HintedRoom()], specs,
                     RolloutLimits(max_new_tokens=2, max_response_tokens=200, max_obs_tokens=64,
                                   mask_void_turns=False), seed=1)[0]
    # the shown text differs at every step (the step counter); the anchor keys still match across steps 1 and 2
    assert t.turn_states == ["Start room", "You see a box.", "You see a box.", "The box is open."]


def test_the_household_wrapper_anchors_on_the_envs_own_feedback():
    from agents.formats.household_agent import StepContext
    from envs.household import HouseholdEnv

    env = StepContext(HouseholdEnv())
    env.reset(seed=0, options={"task_id": 0})
    obs, _, _, _, info = env.step("look")
    anchor = info["anchor_obs"]
    assert obs.startswith(anchor[:60]) and "Not visited:" in obs and "Task:" in obs
    assert "Actions:" not in anchor and "Not visited:" not in anchor and "Task:" not in anchor
