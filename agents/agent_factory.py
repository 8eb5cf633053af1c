"""Pick the agent (prompt format + parsing) that matches an environment id."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from agents.rollout import Agent


def make_agent(env_cfg: Any, tokenizer: PreTrainedTokenizerBase) -> Agent:
    """`env_cfg` has `.id` and `.style` (trainer.config.EnvConfig or any object with those fields)."""
    if env_cfg.id.startswith("alprl/TIRMath"):
        from agents.tir_agent import TIRAgent

        return TIRAgent(tokenizer, style=env_cfg.style)
    raise ValueError(f"no agent for env {env_cfg.id!r}; known: alprl/TIRMath-v0")
