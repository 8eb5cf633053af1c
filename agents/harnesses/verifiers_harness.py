"""A verifiers environment as an alprl harness: `verifiers_play(build)` turns a function that builds a
`verifiers.v1.Env` into the async harness that `env.harness` names, so the env's episodes run through the
policy endpoint and train (the `verifiers` extra: verifiers 0.4).

    # my_vf.py
    import verifiers.v1 as vf
    from agents.harnesses.verifiers_harness import verifiers_play

    def build() -> vf.Env:
        return vf.load_environment(vf.SingleAgentEnvConfig(
            taskset=vf.TasksetConfig(id="my-taskset"), agent=vf.AgentConfig(runtime=vf.SubprocessConfig())))

    play = verifiers_play(build)

    alprl train --config ... rollout.source=harness env.harness=my_vf:play

**Tasks.** The verifiers env brings its tasks and rewards; the trainer picks which task each group plays. An
episode plays `tasks[task.task_index % len(tasks)]`, where `tasks` is the env's taskset iterated once (it must
be bounded) and `task_index` the index the trainer drew for the episode's group (`HarnessTask.task_index`). So
every member of a GRPO group plays the same verifiers task, and a step's groups draw tasks about uniformly with
replacement (train indices are drawn at random per step, trainer/tasks.py): two groups of a step can play the
same task. alprl's env provides only the grouping (`rollout.prompts_per_step` groups of `rollout.group_size`);
its own question and reward are not used. Why not build the verifiers task from alprl's question instead: a
verifiers reward reads the task's own data (its answer, its tests), which alprl's observation does not carry,
and a verifiers user expects the env's dataset to be the dataset.

**Episode.** verifiers' own path, the one its eval runner takes: `env.run_episode(task, ctx)` inside
`env.serving()`. The context's client is the policy endpoint (`base_url`; the episode named by the
`X-Episode-Id` header, since verifiers reads an API key only from an environment variable), its model the
served one, its sampling unset so the endpoint samples at the run's settings (a seat whose sampling sets another
temperature is refused). The harness in the env's seat calls verifiers' interception server, which records the
call on the trace its rewards read and forwards it to the endpoint, which records its token ids and log-probs
for training. One `env.serving()` is held per step, as the eval runner holds one per run: entered by the step's
first episode and left when the step's event loop ends (`asyncio.run` cancels the task that holds it).

**Reward.** The mean `trace.reward` (the weighted sum of the task's `@vf.reward` functions and judges) of the
episode's trainable traces: the one trace of a single-agent env. An episode verifiers reports failed (a setup,
harness or scoring error: `episode.ok` false) raises, so alprl marks it `harness_error`, out of the loss. The
trajectory's info gets `verifiers_task` (the task's `idx`), and `truncated` when a trace ended truncated.

Not covered: a seat must run on the run's client to be trained (one that pins its own client or model is not
recorded); a seat on the run's model that verifiers marks untrainable (its simulated user, an agentic judge) is
recorded and trained as well, since the endpoint sees one episode. Multi-agent envs, tool servers, sandboxed
runtimes, tunnels and judge models are verifiers' own and are not exercised by alprl's tests.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import verifiers.v1 as vf

from agents.endpoint.harness import HarnessFn, HarnessTask

EPISODE_HEADER = "X-Episode-Id"  # agents/endpoint/app.py's; not imported from there, which imports FastAPI
UNSET_KEY_VAR = "ALPRL_VERIFIERS_API_KEY"
"""The variable verifiers reads the endpoint's API key from: left unset (verifiers then sends "EMPTY"), so no
key of the user's (verifiers' default is PRIME_API_KEY) travels to the endpoint; the header names the episode."""


class VerifiersPlayer:
    """Plays alprl episodes as episodes of one verifiers env (module docstring); the env is built on first use."""

    def __init__(self, build: Callable[[], vf.Env]):
        self._build = build
        self._env: vf.Env | None = None
        self._tasks: list[vf.Task] = []
        self._serving: dict[asyncio.AbstractEventLoop, tuple[asyncio.Future, asyncio.Task]] = {}
        """Per event loop (one step), the future set once `env.serving()` is up and the task that holds it."""

    @property
    def env(self) -> vf.Env:
        """The env `build` returns, and its taskset's tasks listed once."""
        if self._env is None:
            env = self._build()
            if not isinstance(env, vf.Env):
                raise TypeError(f"verifiers_play: the build function returned {type(env).__name__}, not a "
                                "verifiers.v1.Env (vf.load_environment(...) builds one)")
            if not env.taskset.bounded:
                raise ValueError(f"verifiers_play: {type(env.taskset).__name__} is infinite; bound it "
                                 "(env.taskset = env.taskset.take(n)) so an episode's task index can pick one")
            self._tasks = list(env.taskset)
            if not self._tasks:
                raise ValueError(f"verifiers_play: {type(env.taskset).__name__} yields no task")
            self._env = env
        return self._env

    @property
    def tasks(self) -> list[vf.Task]:
        """The env's tasks, in its taskset's order (`task.data.idx`)."""
        self.env  # noqa: B018 - built (and its tasks listed) on first use
        return self._tasks

    def task_for(self, task: HarnessTask) -> vf.Task:
        """The verifiers task an alprl episode plays: the group's task index modulo the taskset's size."""
        if task.task_index is None:
            raise ValueError("verifiers_play: the episode's reset names no task index (options['index']) to pick "
                             f"one of {type(self.env.taskset).__name__}'s tasks with")
        return self.tasks[task.task_index % len(self.tasks)]

    async def play(self, task: HarnessTask, base_url: str, api_key: str) -> tuple[float, dict[str, Any]]:
        """One verifiers episode through the endpoint; its reward and facts (module docstring)."""
        vf_task = self.task_for(task)
        client = vf.EvalClientConfig(base_url=base_url, api_key_var=UNSET_KEY_VAR,
                                     headers={EPISODE_HEADER: task.episode_id})
        ctx = vf.ModelContext(model=task.model, client=client, sampling=vf.SamplingConfig())
        await self._served()
        episode = await self.env.run_episode(vf_task, ctx)
        facts: dict[str, Any] = {"verifiers_task": vf_task.data.idx}
        if any(t.is_truncated for t in episode.traces):  # a verifiers limit, or a reply cut at its token budget
            facts["truncated"] = True  # only ever set: the endpoint may have marked the episode truncated itself
        return episode_reward(episode), facts

    async def _served(self) -> None:
        """Wait until this event loop's `env.serving()` is up, entering it on the loop's first episode."""
        loop = asyncio.get_running_loop()
        if loop not in self._serving:
            ready = loop.create_future()
            self._serving[loop] = (ready, loop.create_task(self._hold(loop, ready)))
        await asyncio.shield(self._serving[loop][0])

    async def _hold(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Future) -> None:
        """Hold `env.serving()` open until the loop cancels this task at its end (`asyncio.run` does)."""
        try:
            async with self.env.serving():
                ready.set_result(None)
                await loop.create_future()  # never set: only the loop's end cancels it
        except asyncio.CancelledError:
            pass
        except Exception as err:
            if ready.done():  # serving failed on its way down: asyncio.run reports it at the step's end
                raise
            ready.set_exception(err)  # serving could not start: every episode of the step reports it
        finally:
            self._serving.pop(loop, None)


def episode_reward(episode: vf.Episode) -> float:
    """The mean reward of the episode's trainable traces; raises for an episode verifiers reports failed."""
    if not episode.ok:
        error = episode.last_error or next((t.last_error for t in episode.traces if t.last_error), None)
        reason = f"{error.type}: {error.message}" if error is not None else "no error recorded"
        raise RuntimeError(f"the verifiers episode failed ({reason})")
    rewards = [t.reward for t in episode.traces if t.agent is None or t.agent.trainable]
    if not rewards:
        raise RuntimeError("the verifiers episode has no trainable trace")
    reward = sum(rewards) / len(rewards)
    if not math.isfinite(reward):
        raise RuntimeError(f"the verifiers episode's reward is {reward}")
    return reward


def verifiers_play(build: Callable[[], vf.Env]) -> HarnessFn:
    """The harness `env.harness` names for the verifiers env `build()` returns (module docstring)."""
    player = VerifiersPlayer(build)

    async def play(task: HarnessTask, base_url: str, api_key: str) -> tuple[float, dict[str, Any]]:
        return await player.play(task, base_url, api_key)

    play.player = player  # the built env and its tasks, for tests and inspection
    return play
