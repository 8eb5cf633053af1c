"""Imperfect scripted experts that play an env for SFT data, one player per env family.

A player turns (config, a made env, example index) into an `ExpertEpisode`: the first observation, the
assistant turn texts and the observations the real env returned after each of them. `trainer/sft/train.py` tokenizes
these exactly like rollouts. Example i plays the train task at global index `envs.splits.sft_index(i)`, a range
RL never samples. A new env family registers its player in `agents/env_families.py`.

`cfg` is the run config (`trainer.config.train_config.TrainConfig`: its `env` and `sft` sections, the
warm start's own `sft.seed` among them, are read).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agents.formats.household_agent import command_turn
from envs.bfcl.expert import expert_turns as bfcl_expert_turns
from envs.household import expert_action as household_expert
from envs.splits import derive_seed, sft_index
from envs.tir.expert import expert_turns, single_turn_reply, with_thinking
from envs.tir.tasks import generate_task
from envs.webshop import expert_action as webshop_expert

EXPERT_DATA_VERSION = 2
"""Part of the SFT cache key: bump it when the experts play differently for the same config (version 2: the
expert's randomness comes from `derive_seed`)."""


@dataclass
class ExpertEpisode:
    """question: the first observation; observations[i] follows turns[i] (the last turn has none)."""

    question: str
    turns: list[str]
    observations: list[str]
    reward: float


ExpertPlayer = Callable[[Any, gym.Env, int], ExpertEpisode]
"""(run config, the env as rollouts use it, example index) → one expert episode."""


def expert_rng(cfg: Any, index: int) -> random.Random:
    """The expert's own randomness for example `index` (its skips, miscopies, exploration order)."""
    return random.Random(derive_seed("expert", cfg.sft.seed, index))


def sft_reset(env: gym.Env, index: int) -> str:
    return env.reset(seed=index, options={"split": "train", "index": sft_index(index)})[0]


def play_turns(env: gym.Env, question: str, turns: list[str]) -> ExpertEpisode:
    """Step `env` (reset by the caller, first observation `question`) with the written `turns` until it ends; the
    episode keeps the turns it played."""
    observations, reward = [], 0.0
    for turn in turns:
        obs, reward, terminated, truncated, _ = env.step(turn)
        if terminated or truncated:
            break
        observations.append(obs)
    return ExpertEpisode(question, turns[: len(observations) + 1], observations, float(reward))


def play_tir_expert(cfg: Any, env: gym.Env, index: int) -> ExpertEpisode:
    """One imperfect-expert TIR episode, played through the real env (real sandbox observations)."""
    question = sft_reset(env, index)
    task = generate_task("train", sft_index(index), difficulty=cfg.env.difficulty or None,
                         task_types=cfg.env.task_types or None)
    turns = expert_turns(task, cfg.env.style, rng=expert_rng(cfg, index), p_skip_tool=cfg.sft.p_skip_tool,
                         p_wrong_copy=cfg.sft.p_wrong_copy, varied_phrasing=cfg.sft.varied_phrasing)
    if cfg.sft.expert_thinking:
        turns = with_thinking(turns)
    return play_turns(env, question, turns)


def play_math_expert(cfg: Any, env: gym.Env, index: int) -> ExpertEpisode:
    """One imperfect single-turn episode (`alprl/Math-v0`): a line of working and the boxed answer in one reply,
    graded by the real env; `sft.p_skip_tool` boxes a guess without the working, `sft.p_wrong_copy` miscopies the
    worked result (`envs.tir.expert.single_turn_reply`)."""
    question = sft_reset(env, index)
    task = generate_task("train", sft_index(index), difficulty=cfg.env.difficulty or None,
                         task_types=cfg.env.task_types or None)
    reply = single_turn_reply(task, rng=expert_rng(cfg, index), p_skip_tool=cfg.sft.p_skip_tool,
                              p_wrong_copy=cfg.sft.p_wrong_copy, varied_phrasing=cfg.sft.varied_phrasing)
    _, reward, *_ = env.step(reply)
    return ExpertEpisode(question, [reply], [], float(reward))


def _play_commands(env: gym.Env, question: str, next_command: Callable[[], str],
                   display: Callable[[str, str], str]) -> ExpertEpisode:
    """Play `next_command()` through `env` (reset by the caller, first observation `question`) until it ends.

    Each command is recorded as the agent's turn text (`command_turn`), written as `display(command, obs)`
    (the form the model reads on the page); observations are the env's raw texts, formatted later by the agent.
    """
    turns: list[str] = []
    observations: list[str] = []
    obs, reward = question, 0.0
    while True:
        command = next_command()
        turns.append(command_turn(display(command, obs)))
        obs, reward, terminated, truncated, _ = env.step(command)
        if terminated or truncated:
            return ExpertEpisode(question, turns, observations, float(reward))
        observations.append(obs)


def play_household_expert(cfg: Any, env: gym.Env, index: int) -> ExpertEpisode:
    """One imperfect household episode (reference/environments.md §5): the non-privileged expert (unless
    `env.expert_privileged`) explores unseen receptacles in random order (or `env.expert_search: ordered`) and
    takes a random admissible command with probability `env.expert_epsilon`."""
    question = sft_reset(env, index)
    rng = expert_rng(cfg, index)

    def act() -> str:
        return household_expert(env, rng=rng, epsilon=cfg.env.expert_epsilon,
                                privileged=cfg.env.expert_privileged, search=cfg.env.expert_search)

    return _play_commands(env, question, act, lambda command, page: command)


def clicked_as_shown(action: str, page: str) -> str:
    """`click[x]` with x spelled as on the page (the env lower-cases click arguments: "click[b0ab]" and
    "click[B0AB]" act alike; the model copies what it reads). Other actions are returned unchanged."""
    if not (action.startswith("click[") and action.endswith("]")):
        return action
    arg = action[len("click["):-1]
    shown = next((part for part in page.split(" [SEP] ") if part.lower() == arg), arg)
    return f"click[{shown}]"


def play_webshop_expert(cfg: Any, env: gym.Env, index: int) -> ExpertEpisode:
    """One imperfect WebShop episode (reference/environments.md §5): the page reader (the oracle with
    `env.expert_privileged`), random admissible actions with probability `env.expert_epsilon` and a wrong option
    value with probability `env.expert_wrong_option_p`."""
    question = sft_reset(env, index)
    rng = expert_rng(cfg, index)

    def act() -> str:
        return webshop_expert(env, rng=rng, epsilon=cfg.env.expert_epsilon,
                              wrong_option_p=cfg.env.expert_wrong_option_p, privileged=cfg.env.expert_privileged)

    return _play_commands(env, question, act, clicked_as_shown)


def play_bfcl_expert(cfg: Any, env: gym.Env, index: int) -> ExpertEpisode:
    """One BFCL episode of the ground-truth player (envs/bfcl/expert.py): each user turn answered with its
    ground-truth calls, then a reply without a call; BFCL ships no imperfect play to learn from, so the warm start
    is this, on the entries the train split wraps around (the benchmark itself: a run fits it, documented)."""
    question = sft_reset(env, index)
    session = env.unwrapped.session
    turns = [turn for user_turn in bfcl_expert_turns(session.entry, session.truth) for turn in user_turn]
    return play_turns(env, question, turns)
