"""Pick the agent (prompt format + parsing) that matches an environment id."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from transformers import PreTrainedTokenizerBase

from agents.rollout import Agent

KNOWN = ("alprl/TIRMath-v0", "alprl/Household-v0", "alprl/WebShop-v0")


def make_agent(env_cfg: Any, tokenizer: PreTrainedTokenizerBase) -> Agent:
    """`env_cfg` has `.id` and `.style` (trainer.config.EnvConfig or any object with those fields)."""
    if env_cfg.id.startswith("alprl/TIRMath"):
        from agents.tir_agent import TIRAgent

        return TIRAgent(tokenizer, style=env_cfg.style)
    if env_cfg.id.startswith("alprl/Household"):
        from agents.household_agent import HouseholdAgent

        return HouseholdAgent(tokenizer)
    if env_cfg.id.startswith("alprl/WebShop"):
        from agents.webshop_agent import WebShopAgent

        return WebShopAgent(tokenizer)
    raise ValueError(f"no agent for env {env_cfg.id!r}; known: {', '.join(KNOWN)}")


def wrap_env(env_id: str, env: gym.Env) -> gym.Env:
    """The env as its agent needs it: household steps restate the task and list the admissible commands (the
    Agent protocol sees only observation text; see agents/household_agent.py). Other envs are unchanged."""
    if env_id.startswith("alprl/Household"):
        from agents.household_agent import StepContext

        return StepContext(env)
    return env
