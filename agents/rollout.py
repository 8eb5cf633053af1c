"""Multi-turn rollout driver: the ONLY place that builds `loss_mask`.

For a batch of episodes, each turn: every active episode's context (prompt + response so far) goes to
the engine in one batched call; sampled tokens are appended with mask 1 and their engine log-probs;
the decoded turn text goes to `env.step` (in a thread pool, so sandbox calls overlap); the observation
is tokenized once and appended with mask 0 and log-prob 0.0, capped at `max_obs_tokens` on token ids.
Model output is never decoded and re-encoded into the trajectory.

Episode ends: env terminated/truncated, or the response budget (`max_response_tokens`) is spent, which
ends the episode as truncated with reward 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym

from agents.engines.base import Engine, GenerationRequest
from agents.trajectory import Trajectory


class Agent(Protocol):
    """Env-specific formatting: how observations become token ids and where a turn stops."""

    def stop_strings(self, num_tool_calls: int) -> list[str]: ...

    def prompt_ids(self, first_obs: str, info: dict[str, Any]) -> list[int]: ...

    def observation_ids(self, obs: str) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...

    def turn_ids(self, text: str) -> list[int]:
        """Token ids of an expert-written turn (SFT data only; sampled text is never re-encoded)."""
        ...


@dataclass
class RolloutLimits:
    max_new_tokens: int = 64
    max_response_tokens: int = 256
    max_obs_tokens: int = 64


@dataclass
class EpisodeSpec:
    """Which task an episode plays: `reset(seed=seed, options=options)`; `group_id` groups GRPO samples."""

    seed: int
    options: dict[str, Any]
    group_id: int


def _reset_all(envs: Sequence[gym.Env], specs: Sequence[EpisodeSpec], agent: Agent) -> list[Trajectory]:
    trajs = []
    for env, spec in zip(envs, specs, strict=True):
        obs, info = env.reset(seed=spec.seed, options=spec.options)
        trajs.append(Trajectory(prompt_ids=agent.prompt_ids(obs, info), group_id=spec.group_id,
                                task_id=str(info.get("task_id", "")),
                                info={"task_type": info.get("task_type", ""), "turns": 0, "won": False,
                                      "truncated": False, "void_turn": False, "num_tool_calls": 0}))
    return trajs


def run_episodes(engine: Engine, agent: Agent, envs: Sequence[gym.Env], specs: Sequence[EpisodeSpec],
                 limits: RolloutLimits, *, greedy: bool = False, seed: int | None = None,
                 pool: ThreadPoolExecutor | None = None) -> list[Trajectory]:
    """Play one episode per (env, spec) pair; returns trajectories in the order of `specs`."""
    if len(envs) < len(specs):
        raise ValueError(f"run_episodes: {len(specs)} episodes need as many envs, got {len(envs)}")
    envs = list(envs)[: len(specs)]
    trajs = _reset_all(envs, specs, agent)
    active = list(range(len(specs)))
    own_pool = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=8)
    turn = 0
    try:
        while active:
            budgets = {i: limits.max_response_tokens - len(trajs[i].response_ids) for i in active}
            requests = [GenerationRequest(trajs[i].prompt_ids + trajs[i].response_ids,
                                          min(limits.max_new_tokens, budgets[i]),
                                          agent.stop_strings(trajs[i].info["num_tool_calls"]))
                        for i in active]
            results = engine.generate(requests, greedy=greedy,
                                      seed=None if seed is None else seed * 1000 + turn)
            texts = {}
            for i, res in zip(active, results, strict=True):
                trajs[i].append(res.token_ids, res.logprobs)
                trajs[i].info["turns"] += 1
                texts[i] = agent.decode(res.token_ids)
            outcomes = pool.map(lambda i, text: envs[i].step(text), active, [texts[i] for i in active])
            steps = dict(zip(active, outcomes, strict=True))
            still = []
            for i in active:
                still += [i] if _absorb(trajs[i], steps[i], agent, limits) else []
            active = still
            turn += 1
    finally:
        if own_pool:
            pool.shutdown()
    return trajs


def _absorb(traj: Trajectory, step: tuple, agent: Agent, limits: RolloutLimits) -> bool:
    """Apply one env step to a trajectory; return True if the episode continues."""
    obs, reward, terminated, truncated, info = step
    for key in ("won", "void_turn", "num_tool_calls", "sandbox_error"):
        if key in info:
            traj.info[key] = info[key]
    if terminated or truncated:
        traj.reward = float(reward)
        traj.info["truncated"] = bool(truncated)
        return False
    room = limits.max_response_tokens - len(traj.response_ids)
    obs_ids = agent.observation_ids(obs)[: min(limits.max_obs_tokens, room)]
    traj.append(obs_ids, None)
    if len(traj.response_ids) >= limits.max_response_tokens:
        traj.reward = 0.0
        traj.info["truncated"] = True
        traj.info["budget_exhausted"] = True
        return False
    return True
