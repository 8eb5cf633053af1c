"""Pick the agent (prompt format + parsing) that matches an environment id."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from transformers import PreTrainedTokenizerBase

from agents.rollout import Agent
from envs import generated_twin

KNOWN = ("alprl/TIRMath-v0", "alprl/Household-v0", "alprl/WebShop-v0", "alprl/ALFWorld-v0", "alprl/WebShopServer-v0")


def agent_class(env_id: str) -> type:
    """The agent class that formats episodes of `env_id` (an adapter's: its generated twin's)."""
    env_id = generated_twin(env_id)
    if env_id.startswith("alprl/TIRMath"):
        from agents.tir_agent import TIRAgent

        return TIRAgent
    if env_id.startswith("alprl/Household"):
        from agents.household_agent import HouseholdAgent

        return HouseholdAgent
    if env_id.startswith("alprl/WebShop"):
        from agents.webshop_agent import WebShopAgent

        return WebShopAgent
    raise ValueError(f"no agent for env {env_id!r}; known: {', '.join(KNOWN)}")


def make_agent(env_cfg: Any, tokenizer: PreTrainedTokenizerBase) -> Agent:
    """`env_cfg` has `.id` and `.style` (trainer.config.EnvConfig or any object with those fields)."""
    cls = agent_class(env_cfg.id)
    if env_cfg.id.startswith("alprl/TIRMath"):
        return cls(tokenizer, style=env_cfg.style)
    return cls(tokenizer)


def agent_format(env_id: str) -> str:
    """Names the text format of `env_id`'s agent ("HouseholdAgent/2"), for cache keys of data built with it."""
    cls = agent_class(env_id)
    return f"{cls.__name__}/{cls.format_version}"


def wrap_env(env_id: str, env: gym.Env) -> gym.Env:
    """The env as its agent needs it: household steps restate the task and list the admissible commands (the
    Agent protocol sees only observation text; see agents/household_agent.py). Other envs are unchanged."""
    if env_id.startswith("alprl/Household"):
        from agents.household_agent import StepContext

        return StepContext(env)
    return env
