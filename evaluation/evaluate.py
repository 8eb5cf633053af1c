"""Held-out evaluation: per-example records first, reductions separately.

The same `evaluation_records` runs inside training (every `eval_every` steps), in `alprl eval` and in every
condition of `alprl robustness`; `EvalSettings` is what all three read (`trainer/setup/saved_config.py` builds it from a
run config), so a checkpoint is played with the env, prompt format, stop strings, limits and sampling its run
evaluated it with.

`evaluation_chunks` yields the same records one engine call at a time, so `alprl eval` can store each call's records
as it finishes and a rerun can skip the calls already stored: chunk boundaries and seeds depend only on the settings,
so the calls it replays sample what they would have sampled in one uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agents.engines.base import Engine
from agents.env_families import make_agent, make_env
from agents.rollout import Agent, EpisodeSpec, RolloutLimits, run_episodes
from agents.trajectory import Trajectory
from envs.splits import derive_seed


@dataclass(frozen=True)
class EvalSettings:
    """How a model is evaluated. `env`: a run config's env section (what `agents.env_families.make_env` and
    `make_agent` read); `num_envs`: episodes played per engine call, which also fixes each episode's sampling seed
    (seeds derive from `seed`, the call's first episode and the episode's place in the call)."""

    env: Any
    limits: RolloutLimits
    samples_per_task: int  # no defaults: a run config is the one source (trainer/setup/saved_config.py eval_settings)
    greedy: bool
    temperature: float
    top_p: float
    top_k: int
    seed: int
    num_envs: int

    def make_envs(self, num_episodes: int) -> list[gym.Env]:
        """The envs one evaluation of `num_episodes` episodes plays on (never more than `num_envs`)."""
        return [make_env(self.env) for _ in range(max(1, min(self.num_envs, num_episodes)))]

    def make_agent(self, tokenizer) -> Agent:
        return make_agent(self.env, tokenizer)


def evaluation_specs(split: str, num_tasks: int, samples_per_task: int = 1) -> list[EpisodeSpec]:
    """The episodes of an evaluation, in order: `samples_per_task` of each `split` index 0..num_tasks-1."""
    return [EpisodeSpec(seed=i, options={"split": split, "index": i}, group_id=i)
            for i in range(num_tasks) for _ in range(samples_per_task)]


def chunk_starts(num_episodes: int, chunk_size: int) -> list[int]:
    """Where each engine call of an evaluation starts (its episodes are [start, start + chunk_size))."""
    return list(range(0, num_episodes, chunk_size))


def evaluation_chunks(engine: Engine, agent: Agent, envs: Sequence[gym.Env], split: str, num_tasks: int,
                      limits: RolloutLimits, *, samples_per_task: int = 1, greedy: bool = False, seed: int = 0,
                      pool: ThreadPoolExecutor | None = None,
                      skip: Collection[int] = ()) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(chunk start, its records) for each engine call of `evaluation_records`, as each call finishes; chunks
    whose start is in `skip` are not played (a resumed evaluation replays the others with the same seeds).

    Nothing here trains, so void turns are not masked out (`limits.mask_void_turns` is ignored): that changes no
    sampled token or reward, and keeps each episode's count of sampled tokens.
    """
    specs = evaluation_specs(split, num_tasks, samples_per_task)
    limits = dataclasses.replace(limits, mask_void_turns=False)
    for start in chunk_starts(len(specs), len(envs)):
        if start in skip:
            continue
        chunk = specs[start: start + len(envs)]
        trajs = run_episodes(engine, agent, envs, chunk, limits, greedy=greedy,
                             seed=derive_seed("eval-sampling", seed, start), pool=pool)
        yield start, [_record(start + i, samples_per_task, t, agent) for i, t in enumerate(trajs)]


def _record(episode: int, samples_per_task: int, t: Trajectory, agent: Agent) -> dict[str, Any]:
    """One episode's record; `extracted_answer` only from envs that report one (the math envs), so a reduction
    can tell "no answer" from "an env without answers". `response`: the whole response as text (sampled turns and
    the environment's observations between them), decoded from the ids the engine returned; for an episode of
    several traces (agents/trajectory.py) each trace's response in turn, and `traces` counts them."""
    answer = {"extracted_answer": str(t.info["extracted_answer"])} if "extracted_answer" in t.info else {}
    traces = {"traces": len(t.traces)} if t.earlier else {}
    return {"index": episode // samples_per_task, "sample": episode % samples_per_task, "task_id": t.task_id,
            "task_type": t.info.get("task_type", ""), "reward": t.reward, "won": bool(t.info.get("won")), **answer,
            "turns": t.info.get("turns", 0), "tool_calls": t.info.get("num_tool_calls", 0),
            "response_tokens": t.episode_response_len, "sampled_tokens": t.episode_sampled_tokens, **traces,
            "truncated": bool(t.info.get("truncated")),
            "response": "".join(agent.decode(list(trace.response_ids)) for trace in t.traces)}


def evaluation_records(engine: Engine, agent: Agent, envs: Sequence[gym.Env], split: str, num_tasks: int,
                       limits: RolloutLimits, *, samples_per_task: int = 1, greedy: bool = False, seed: int = 0,
                       pool: ThreadPoolExecutor | None = None) -> list[dict[str, Any]]:
    """One record per (task, sample) of `split` indices 0..num_tasks-1: reward, won, extracted answer, turns,
    tool calls, tokens.

    Episodes run in chunks of `len(envs)`; sampling is seeded by `seed` and the chunk, so the same
    weights give the same records.
    """
    return [r for _, chunk in evaluation_chunks(engine, agent, envs, split, num_tasks, limits,
                                                samples_per_task=samples_per_task, greedy=greedy, seed=seed,
                                                pool=pool) for r in chunk]


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
