"""Imperfect experts that produce SFT data, one player per environment.

A player turns (config, example index) into an `ExpertEpisode`: the first observation, the assistant turn
texts and the observations the real env returned after each of them. `trainer/sft.py` tokenizes these
exactly like rollouts. To support a new env, add a player and register it in `PLAYERS`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym

from agents.household_agent import HOUSEHOLD_SYSTEM_PROMPT, command_turn
from agents.webshop_agent import WEBSHOP_SYSTEM_PROMPT
from envs import ADAPTER_TWINS  # (importing envs registers the alprl/* environments)
from envs.household import expert_action as household_expert
from envs.tir.expert import expert_turns
from envs.tir.styles import get_style
from envs.tir.tasks import generate_task
from envs.webshop import expert_action as webshop_expert
from trainer.components import env_kwargs, make_env
from trainer.config import TrainConfig

SFT_INDEX_OFFSET = 500_000  # SFT tasks come from a train-split index range RL never samples


@dataclass
class ExpertEpisode:
    """question: the first observation; observations[i] follows turns[i] (the last turn has none)."""

    question: str
    turns: list[str]
    observations: list[str]
    reward: float


def play_tir_expert(cfg: TrainConfig, index: int) -> ExpertEpisode:
    """One imperfect-expert TIR episode, played through the real env (real sandbox observations)."""
    env = gym.make(cfg.env.id, **env_kwargs(cfg))
    try:
        options = {"split": "train", "index": SFT_INDEX_OFFSET + index}
        question, info = env.reset(seed=index, options=options)
        task = generate_task("train", SFT_INDEX_OFFSET + index, difficulty=cfg.env.difficulty or None,
                             task_types=cfg.env.task_types or None)
        rng = random.Random(cfg.seed * 7919 + index)
        turns = expert_turns(task, cfg.env.style, rng=rng, p_skip_tool=cfg.sft.p_skip_tool,
                             p_wrong_copy=cfg.sft.p_wrong_copy, varied_phrasing=cfg.sft.varied_phrasing)
        observations, reward = [], 0.0
        for turn in turns:
            obs, reward, terminated, truncated, _ = env.step(turn)
            if terminated or truncated:
                break
            observations.append(obs)
        return ExpertEpisode(question, turns[: len(observations) + 1], observations, float(reward))
    finally:
        env.close()


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


def _sft_reset(env: gym.Env, index: int) -> str:
    return env.reset(seed=index, options={"split": "train", "index": SFT_INDEX_OFFSET + index})[0]


def play_household_expert(cfg: TrainConfig, index: int) -> ExpertEpisode:
    """One imperfect household episode (reference/environments.md §5): the non-privileged expert (unless
    `env.expert_privileged`) explores unseen receptacles in random order (or `env.expert_search: ordered`) and
    takes a random admissible command with probability `env.expert_epsilon`."""
    env = make_env(cfg)
    try:
        question = _sft_reset(env, index)
        rng = random.Random(cfg.seed * 7919 + index)

        def act() -> str:
            return household_expert(env, rng=rng, epsilon=cfg.env.expert_epsilon,
                                    privileged=cfg.env.expert_privileged, search=cfg.env.expert_search)

        return _play_commands(env, question, act, lambda command, page: command)
    finally:
        env.close()


def clicked_as_shown(action: str, page: str) -> str:
    """`click[x]` with x spelled as on the page (the env lower-cases click arguments: "click[b0ab]" and
    "click[B0AB]" act alike; the model copies what it reads). Other actions are returned unchanged."""
    if not (action.startswith("click[") and action.endswith("]")):
        return action
    arg = action[len("click["):-1]
    shown = next((part for part in page.split(" [SEP] ") if part.lower() == arg), arg)
    return f"click[{shown}]"


def play_webshop_expert(cfg: TrainConfig, index: int) -> ExpertEpisode:
    """One imperfect WebShop episode (reference/environments.md §5): the page reader (the oracle with
    `env.expert_privileged`), random admissible actions with probability `env.expert_epsilon` and a wrong option
    value with probability `env.expert_wrong_option_p`."""
    env = make_env(cfg)
    try:
        question = _sft_reset(env, index)
        rng = random.Random(cfg.seed * 7919 + index)

        def act() -> str:
            return webshop_expert(env, rng=rng, epsilon=cfg.env.expert_epsilon,
                                  wrong_option_p=cfg.env.expert_wrong_option_p, privileged=cfg.env.expert_privileged)

        return _play_commands(env, question, act, clicked_as_shown)
    finally:
        env.close()


PLAYERS: dict[str, Callable[[TrainConfig, int], ExpertEpisode]] = {
    "alprl/TIRMath": play_tir_expert, "alprl/Household": play_household_expert,
    "alprl/WebShop": play_webshop_expert}
"""Env-id prefix → expert player."""


def expert_player(env_id: str) -> Callable[[TrainConfig, int], ExpertEpisode]:
    if env_id in ADAPTER_TWINS:
        raise ValueError(f"no SFT expert for {env_id}: it plays the real environment. Warm-start on its generated "
                         f"twin {ADAPTER_TWINS[env_id]} (`alprl sft` with env.id={ADAPTER_TWINS[env_id]}) and pass "
                         f"that model as model.path")
    for prefix, player in PLAYERS.items():
        if env_id.startswith(prefix):
            return player
    raise ValueError(f"no SFT expert for env {env_id!r}; experts exist for: {', '.join(PLAYERS)}")


def system_prompt(cfg: TrainConfig) -> str:
    """The system prompt text the agent will use (part of the tokenizer corpus)."""
    if cfg.env.id.startswith("alprl/TIRMath"):
        return get_style(cfg.env.style).system_prompt
    if cfg.env.id.startswith("alprl/Household"):
        return HOUSEHOLD_SYSTEM_PROMPT
    if cfg.env.id.startswith("alprl/WebShop"):
        return WEBSHOP_SYSTEM_PROMPT
    return ""
