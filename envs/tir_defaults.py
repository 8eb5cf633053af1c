"""The math envs' defaults, each written once: `alprl/TIRMath-v0` and `alprl/Math-v0` take them when `gym.make`
names none, and the run config's `env.*` keys take them as their defaults (trainer/config/train_config.py), so a
Gymnasium user and `alprl train` get the same episode.

A module of its own, outside envs/tir/, so that importing the config does not load the envs.
"""

DEFAULT_STYLE = "simpletir"
"""TIR convention (`env.style`; envs/tir/styles.py): the envs', agents' and scripted expert's when none is named."""

DEFAULT_MAX_TURNS = 3
"""Assistant turns per episode before truncation (`env.max_turns`); SimpleTIR trains with 5 and evaluates with 10."""

DEFAULT_DIFFICULTY = 1
"""Generated problems' level, 1-3 (`env.difficulty`, where 0 means every level; the envs take None for that)."""

DEFAULT_SANDBOX_RETRY_S = 10.0
"""Seconds an HTTP tool call retries infrastructure errors across the sandbox URLs before it is a SandboxError
(`env.sandbox_retry_s`; docs/sandbox.md)."""
