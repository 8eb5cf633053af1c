"""Held-out evaluation: per-example records first, reductions separately.

The same `evaluation_records` runs inside training (every `eval_every` steps), in `alprl eval` and in every
condition of `alprl robustness`; `EvalSettings` is what all three read (`trainer/run_config.py` builds it from a
run config), so a checkpoint is played with the env, prompt format, stop strings, limits and sampling its run
evaluated it with.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agents.engines.base import Engine
from agents.env_families import make_agent, make_env
from agents.rollout import Agent, EpisodeSpec, RolloutLimits, run_episodes
from envs.splits import derive_seed


@dataclass(frozen=True)
class EvalSettings:
    """How a model is evaluated. `env`: a run config's env section (what `agents.env_families.make_env` and
    `make_agent` read); `num_envs`: episodes played per engine call, which also fixes each episode's sampling seed
    (seeds derive from `seed`, the call's first episode and the episode's place in the call)."""

    env: Any
    limits: RolloutLimits
    samples_per_task: int = 1
    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    num_envs: int = 16

    def make_envs(self, num_episodes: int) -> list[gym.Env]:
        """The envs one evaluation of `num_episodes` episodes plays on (never more than `num_envs`)."""
        return [make_env(self.env) for _ in range(max(1, min(self.num_envs, num_episodes)))]

    def make_agent(self, tokenizer) -> Agent:
        return make_agent(self.env, tokenizer)


def evaluation_records(engine: Engine, agent: Agent, envs: Sequence[gym.Env], split: str, num_tasks: int,
                       limits: RolloutLimits, *, samples_per_task: int = 1, greedy: bool = False, seed: int = 0,
                       pool: ThreadPoolExecutor | None = None) -> list[dict[str, Any]]:
    """One record per (task, sample) of `split` indices 0..num_tasks-1: reward, won, turns, tokens.

    Episodes run in chunks of `len(envs)`; sampling is seeded by `seed` and the chunk, so the same
    weights give the same records.
    """
    specs = [EpisodeSpec(seed=i, options={"split": split, "index": i}, group_id=i)
             for i in range(num_tasks) for _ in range(samples_per_task)]
    records = []
    for start in range(0, len(specs), len(envs)):
        chunk = specs[start: start + len(envs)]
        trajs = run_episodes(engine, agent, envs, chunk, limits, greedy=greedy, seed=derive_seed("eval-sampling", seed, start),
                             pool=pool)
        for spec, t in zip(chunk, trajs, strict=True):
            records.append({"index": spec.options["index"], "task_id": t.task_id,
                            "task_type": t.info.get("task_type", ""), "reward": t.reward,
                            "won": bool(t.info.get("won")), "turns": t.info.get("turns", 0),
                            "tool_calls": t.info.get("num_tool_calls", 0),
                            "response_tokens": len(t.response_ids)})
    return records


def summarize(records: Sequence[dict[str, Any]], prefix: str = "eval") -> dict[str, float]:
    """Success rate (overall and per task type), mean reward, tool use, turns."""
    if not records:
        return {}
    out = {f"{prefix}/success": statistics.fmean(float(r["won"]) for r in records),
           f"{prefix}/reward": statistics.fmean(r["reward"] for r in records),
           f"{prefix}/tool_calls": statistics.fmean(r["tool_calls"] for r in records),
           f"{prefix}/turns": statistics.fmean(r["turns"] for r in records)}
    by_type: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by_type[r["task_type"]].append(float(r["won"]))
    for task_type, wins in sorted(by_type.items()):
        if task_type:
            out[f"{prefix}/success/{task_type}"] = statistics.fmean(wins)
    return out
