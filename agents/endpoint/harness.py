"""`rollout.source=harness`: a user's agent harness plays each episode against the policy endpoint, and the trainer
trains on what the endpoint recorded.

The contract (`env.harness=module:function`):

    async def play(task: HarnessTask, base_url: str, api_key: str) -> float | tuple[float, dict]

`base_url` and `api_key` are for any OpenAI client (`AsyncOpenAI(base_url=base_url, api_key=api_key)`); the key
names the episode, so every call made with it is recorded for it (a harness may also send `task.episode_id` as the
`X-Episode-Id` header or the `user` field). `task` holds the env already reset to the episode's task: its first
observation, the configured agent's opening messages, the style's tools and stop strings, and `await
task.step(action)` to step the env (its reward, and the facts it reports: won, tool calls, a sandbox error). The
harness returns the episode's reward, optionally with facts for the trajectory's info (`won`, ...).

Episodes run as asyncio tasks, at most `concurrency` at once (0: all), one endpoint per call of `run`. An episode
whose harness raised, returned something other than a finite reward, ran past `timeout_s`, or had a request
refused by the endpoint is still returned, marked (`harness_error`, `episode_timeout`, or the refusal's reason;
agents/trajectory.py): never lost. `run` returns one trajectory per spec, in order, as `run_episodes` does: an
episode whose harness broke its prefix (agents/endpoint/recorder.py) holds a trace per break, and counts once in its
group's statistics, as a native episode of several traces does.

Departure from the native rollout: the timeout is per episode (natively the rollout call's deadline).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import os
import secrets
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
from transformers import PreTrainedTokenizerBase

from agents.endpoint.recorder import EpisodeLog, Recorder
from agents.endpoint.sampler import Sampler
from agents.endpoint.server import EndpointServer
from agents.endpoint.service import EndpointSettings, PolicyService
from agents.engines.base import Engine
from agents.formats.tir_agent import TIRAgent
from agents.rollout import Agent, EpisodeSpec
from agents.trajectory import Trajectory


@dataclass
class HarnessTask:
    """One episode as its harness sees it (module docstring)."""

    episode_id: str
    index: int
    """The episode's position in the batch."""
    group_id: int
    task_id: str
    model: str
    """The model name the endpoint serves."""
    observation: str
    """The env's first observation (the question)."""
    messages: list[dict[str, Any]]
    """The configured agent's opening messages (system prompt + task), as the native rollout renders them."""
    tools: list[dict[str, Any]] | None
    """The style's tool schemas (hermes: `code_interpreter`), None for a style without function calls."""
    stop: list[str]
    """The first turn's stop strings of the configured agent (`stop_strings(n)` for turn n's)."""
    style: str | None
    """The TIR style the agent writes (envs/tir/styles.py: how a turn calls the tool), None for other agents."""
    info: dict[str, Any]
    """The env's reset info."""
    env: gym.Env
    task_index: int | None = None
    """The task index the trainer picked for the episode's group (`options["index"]` of its reset: a position in
    the split), None when the reset names none; a harness that brings its own tasks picks one with it."""
    stop_strings: Callable[[int], list[str]] = field(repr=False, default=lambda n: [])
    on_step: Callable[[dict[str, Any]], None] = field(repr=False, default=lambda info: None)
    pool: ThreadPoolExecutor | None = field(repr=False, default=None)

    async def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """`env.step(action)` off the event loop; the facts it reports are kept for the episode."""
        out = await asyncio.get_running_loop().run_in_executor(self.pool, self.env.step, action)
        self.on_step(out[4])
        return out


HarnessFn = Callable[[HarnessTask, str, str], Awaitable[Any]]


def load_harness(spec: str) -> HarnessFn:
    """The async function `module:function` names, the module found on `sys.path` or in the working directory (a
    console script's path starts at its own bin directory, not where the user runs it); a ValueError that names the
    key and what is wrong."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"env.harness={spec!r}: expected module:function, e.g. my_agents.tir:play")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # appended: a module of the working directory never shadows an installed one
    try:
        fn = getattr(importlib.import_module(module), name, None)
    except Exception as err:  # the user's module failed to import: say so, with its own error
        raise ValueError(f"env.harness={spec!r}: cannot import {module}: {type(err).__name__}: {err}") from err
    if not inspect.iscoroutinefunction(fn):
        raise ValueError(f"env.harness={spec!r}: {name} must be an async function (task, base_url, api_key) -> "
                         f"reward, got {type(fn).__name__}")
    return fn


def task_tools(agent: Agent, first_obs: str = "") -> list[dict[str, Any]] | None:
    """The tools the episode's calls may use: a TIR agent's style's (hermes' `code_interpreter`), the entry's
    functions for an agent that opens with its own (BFCL's, `opening`); None for other agents and styles."""
    if hasattr(agent, "opening"):
        return agent.opening(first_obs)[1]
    schema = agent.style.tool_schema if isinstance(agent, TIRAgent) else None
    return None if schema is None else [schema]


def _task_index(spec: EpisodeSpec) -> int | None:
    """The group's task index, the one the trainer's specs carry (trainer/tasks.py `group_specs`)."""
    index = spec.options.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def task_style(agent: Agent) -> str | None:
    return agent.style.name if isinstance(agent, TIRAgent) else None


class HarnessSource:
    """Plays batches of episodes with a harness through the policy endpoint (module docstring)."""

    def __init__(self, engine: Engine, agent: Agent, tokenizer: PreTrainedTokenizerBase, envs: Sequence[gym.Env],
                 harness: HarnessFn, settings: EndpointSettings, *, concurrency: int = 0,
                 timeout_s: float | None = None, pool: ThreadPoolExecutor | None = None):
        self.engine, self.agent, self.tok, self.envs = engine, agent, tokenizer, list(envs)
        self.harness, self.settings, self.concurrency, self.timeout_s, self.pool = \
            harness, settings, concurrency, timeout_s, pool
        self._live = 0

    def run(self, specs: Sequence[EpisodeSpec], seed: int | None) -> list[Trajectory]:
        """One trajectory per spec (the episode, with a trace per prefix break), in order; calls are seeded from
        `seed` as native turns are."""
        if len(self.envs) < len(specs):
            raise ValueError(f"HarnessSource.run: {len(specs)} episodes need as many envs, got {len(self.envs)}")
        recorder = Recorder(self.settings.max_response_tokens,
                            lambda ids: self.tok.decode(ids, skip_special_tokens=True))
        nonce = secrets.token_hex(4)
        tasks = [self._task(recorder, env, spec, i, f"ep-{nonce}-{i}")
                 for i, (env, spec) in enumerate(zip(self.envs[: len(specs)], specs, strict=True))]
        sampler = Sampler(self.engine, live=lambda: self._live)
        service = PolicyService(self.tok, sampler, recorder, replace(self.settings, seed=seed),
                                self.engine.max_model_len)
        try:
            with EndpointServer(service) as server:
                rewards = asyncio.run(self._play_all(tasks, server.base_url, recorder, sampler))
        finally:
            sampler.close()
        if service.engine_died is not None:  # as natively: a dead engine ends the run, not one episode
            raise service.engine_died
        return [recorder.trajectory(recorder.episodes[task.episode_id], reward,
                                    self.agent.prompt_ids(task.observation, task.info))
                for task, reward in zip(tasks, rewards, strict=True)]

    @staticmethod
    def metrics(episodes: list[Trajectory]) -> dict[str, float]:
        """The step's endpoint metric: `rollout/prefix_breaks`, calls that did not extend their episode's tokens (each
        began a trace; `rollout/traces_per_episode` counts them all)."""
        return {"rollout/prefix_breaks": float(sum(e.info.get("prefix_breaks", 0) for e in episodes))}

    def _task(self, recorder: Recorder, env: gym.Env, spec: EpisodeSpec, index: int, episode_id: str) -> HarnessTask:
        obs, info = env.reset(seed=spec.seed, options=spec.options)
        task_id = str(info.get("task_id", ""))
        ep = recorder.register(episode_id, index, group_id=spec.group_id, task_id=task_id,
                               info={"task_type": info.get("task_type", "")})
        return HarnessTask(episode_id, index, spec.group_id, task_id, self.settings.model_name, obs,
                           self.agent.messages(obs), task_tools(self.agent, obs), self.agent.stop_strings(0),
                           task_style(self.agent), info, env, task_index=_task_index(spec),
                           stop_strings=self.agent.stop_strings, on_step=lambda facts: self._stepped(recorder, ep,
                                                                                                     facts),
                           pool=self.pool)

    @staticmethod
    def _stepped(recorder: Recorder, ep: EpisodeLog, facts: dict[str, Any]) -> None:
        recorder.absorb(ep, facts)
        if facts.get("sandbox_error"):  # the sandbox could not run a tool call: as natively, not the policy's
            recorder.mark(ep, "sandbox_error", "a tool call came back SandboxError after the client's retries")

    async def _play_all(self, tasks: list[HarnessTask], base_url: str, recorder: Recorder,
                        sampler: Sampler) -> list[float]:
        gate = asyncio.Semaphore(self.concurrency or max(len(tasks), 1))

        async def one(task: HarnessTask) -> float:
            async with gate:
                self._live += 1
                try:
                    return await self._play(task, base_url, recorder)
                finally:
                    self._live -= 1
                    sampler.wake()  # one episode fewer to wait for before a batch goes

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    async def _play(self, task: HarnessTask, base_url: str, recorder: Recorder) -> float:
        """The harness's reward for one episode; 0.0 with the episode marked when it failed (module docstring)."""
        ep = recorder.episodes[task.episode_id]
        try:
            out = await asyncio.wait_for(self.harness(task, base_url, task.episode_id), self.timeout_s)
        except TimeoutError:
            ep.info["timed_out"] = ep.info["truncated"] = True
            recorder.mark(ep, "episode_timeout", f"the harness ran past rollout.episode_timeout_s={self.timeout_s}")
            return 0.0
        except Exception as err:  # the user's code failed: the episode is marked, the batch goes on
            ep.info["harness_error"] = f"{type(err).__name__}: {err}"
            recorder.mark(ep, "harness_error", f"the harness raised {type(err).__name__}: {err}")
            return 0.0
        reward, facts = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward) \
                or not isinstance(facts, dict):
            ep.info["harness_error"] = f"returned {out!r}"
            recorder.mark(ep, "harness_error", f"the harness returned {out!r}, not a finite reward (or "
                                               "(reward, info dict))")
            return 0.0
        recorder.absorb(ep, facts, keys=None)
        return float(reward)
