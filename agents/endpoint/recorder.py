"""Episodes as the policy endpoint saw them: each call's prompt ids, sampled ids and sampled log-probs, exactly as the
engine produced them, stitched into one `Trajectory` an episode.

Stitching. An episode's first call's prompt ids are its first trace's prompt. A later call whose prompt ids start
with the trace's tokens so far (prompt + response) extends it: the ids in between (a tool's output, the next user or
tool turn the chat template writes, the next generation prompt) are appended with loss mask 0 and rollout log-prob
0.0, then the sampled ids with mask 1 and their log-probs, one turn (`Trajectory.append_turn`). A call whose prompt
does not extend the trace (the harness edited, dropped or re-rendered its history) starts a new trace of the same
episode (`Trajectory.start_trace`, reason "prefix_break", counted in `rollout/prefix_breaks`): a row of its own in the
batch, while the episode keeps one reward and one place in its group (agents/trajectory.py).
Nothing here decodes and re-encodes a sampled id; which prompt ids a call has is agents/endpoint/chat.py's question.

Like agents/rollout.py, the recorder builds trajectories only through `Trajectory.append` / `append_turn` (the
mask is set there) and marks failed episodes only through `Trajectory.mark_infra_failure`; it is the endpoint's
rollout driver, the second one, so each sample keeps the invariants of the native one: mask 1 exactly on sampled
ids, log-prob 0.0 elsewhere, the response budget (`max_response_tokens`) never exceeded.

A turn's state key (GiGPO's anchor) is the text of the ids the policy acted on that it did not write: the whole
prompt for a trace's first turn, the appended ids for a later one (the observation, as natively).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.trajectory import INFRA_FAILURE_REASONS, Trajectory, state_key

EPISODE_FACTS = ("won", "void_turn", "num_tool_calls", "invalid_actions", "extracted_answer")
"""Env step facts an episode keeps, as `agents/rollout.py` keeps them (the harness reports them through
`HarnessTask.step` or its returned info)."""

RECORDER_KEYS = ("turns", "episode_id", "prefix_breaks", "endpoint_errors", "infra_failure", "loss_masked", "masked_by",
                 "trace", "traces", "trace_start", "trace_starts")
"""Info keys the recorder and the trajectory write, which a harness's returned facts cannot overwrite."""


@dataclass
class CallRecord:
    """One model call of an episode, as the engine produced it."""

    index: int
    """The episode's call number: its sampling seed derives from it (agents/endpoint/service.py)."""
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    exchange: Any = None
    """What the call stands for in the client's terms (agents/endpoint/chat.py's `Exchange`): a later call whose
    messages repeat it gets these sampled ids, not a re-encoding of their text."""
    version: int = 0
    """The policy version of the weights the engine held (`Engine.weight_version`)."""


@dataclass
class EpisodeLog:
    """Everything recorded for one episode id; guarded by `lock` (calls of one episode may overlap)."""

    episode_id: str
    index: int
    """The episode's position in its batch (seeds derive from it, as a native episode's do)."""
    group_id: int = 0
    task_id: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    trajectory: Trajectory | None = None
    """The episode's tokens so far (its current trace, earlier ones in `earlier`); None before its first call."""
    prefix_breaks: int = 0
    failure: str | None = None
    """Why the infrastructure failed the episode (`INFRA_FAILURE_REASONS`); None while it has not."""
    next_call: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Recorder:
    """The episodes of one endpoint. `open_episodes`: an unknown episode id starts a new episode (a standalone
    server); otherwise only registered ids are served (the harness source registers each episode first)."""

    def __init__(self, max_response_tokens: int, decode: Callable[[list[int]], str], open_episodes: bool = False):
        self.max_response_tokens = max_response_tokens
        self.decode = decode
        self.open_episodes = open_episodes
        self.episodes: dict[str, EpisodeLog] = {}
        self._lock = threading.Lock()

    def register(self, episode_id: str, index: int, *, group_id: int = 0, task_id: str = "",
                 info: dict[str, Any] | None = None) -> EpisodeLog:
        with self._lock:
            if episode_id in self.episodes:
                raise ValueError(f"episode id {episode_id!r} is registered already")
            ep = EpisodeLog(episode_id, index, group_id, task_id, dict(info or {}))
            self.episodes[episode_id] = ep
            return ep

    def get(self, episode_id: str) -> EpisodeLog | None:
        """The episode `episode_id`; with `open_episodes` a new one for an id not seen before."""
        with self._lock:
            ep = self.episodes.get(episode_id)
            if ep is None and self.open_episodes:
                ep = self.episodes[episode_id] = EpisodeLog(episode_id, len(self.episodes))
            return ep

    @staticmethod
    def _extends(trace: Trajectory | None, prompt_ids: list[int]) -> bool:
        if trace is None:
            return False
        tokens = len(trace.prompt_ids) + len(trace.response_ids)
        return len(prompt_ids) >= tokens and prompt_ids[: len(trace.prompt_ids)] == trace.prompt_ids \
            and prompt_ids[len(trace.prompt_ids): tokens] == trace.response_ids

    def room(self, ep: EpisodeLog, prompt_ids: list[int]) -> int:
        """Response tokens a call with these prompt ids may still sample: the budget less the trace's response
        after this call's prompt is stitched in (a whole budget where the call starts a new trace)."""
        with ep.lock:
            if not self._extends(ep.trajectory, prompt_ids):
                return self.max_response_tokens
            return self.max_response_tokens - (len(prompt_ids) - len(ep.trajectory.prompt_ids))

    @staticmethod
    def take_call_index(ep: EpisodeLog) -> int:
        """The next call number of the episode (one per call that reaches the engine)."""
        with ep.lock:
            ep.next_call += 1
            return ep.next_call - 1

    def record(self, ep: EpisodeLog, call: CallRecord) -> None:
        """Stitch one finished call into the episode's trajectory (module docstring)."""
        with ep.lock:
            ep.calls.append(call)
            traj = ep.trajectory
            if self._extends(traj, call.prompt_ids):
                extra = call.prompt_ids[len(traj.prompt_ids) + len(traj.response_ids):]
                state = self.decode(extra)
            else:
                if traj is None:
                    traj = ep.trajectory = Trajectory(prompt_ids=list(call.prompt_ids), group_id=ep.group_id,
                                                      task_id=ep.task_id, info={"turns": 0})
                else:
                    ep.prefix_breaks += 1
                    traj.start_trace(list(call.prompt_ids), "prefix_break")
                extra, state = [], self.decode(call.prompt_ids)
            room = max(self.max_response_tokens - len(traj.response_ids), 0)
            traj.append(extra[:room], None)  # a cut here ends the trace: there is no room left to sample
            if call.completion_ids:
                traj.append_turn(call.completion_ids, call.logprobs, state_key(state), version=call.version)
                traj.info["turns"] += 1
            if len(traj.response_ids) >= self.max_response_tokens:
                ep.info["budget_exhausted"] = ep.info["truncated"] = True

    @staticmethod
    def mark(ep: EpisodeLog, reason: str, message: str) -> None:
        """Note that the infrastructure failed the episode (the first reason stays); its samples are marked when
        the episode ends (`trajectories`)."""
        if reason not in INFRA_FAILURE_REASONS:
            raise ValueError(f"mark: unknown reason {reason!r}; valid: {', '.join(INFRA_FAILURE_REASONS)}")
        with ep.lock:
            ep.failure = ep.failure or reason
            ep.info.setdefault("endpoint_errors", []).append(message)

    @staticmethod
    def absorb(ep: EpisodeLog, facts: dict[str, Any], keys: tuple[str, ...] | None = EPISODE_FACTS) -> None:
        """Keep the episode facts among `facts`: those named in `keys` (an env step's info), or with `keys=None`
        all but the recorder's own (a harness's returned info)."""
        with ep.lock:
            ep.info.update({k: v for k, v in facts.items()
                            if (k in keys if keys is not None else k not in RECORDER_KEYS)})

    def trajectory(self, ep: EpisodeLog, reward: float, empty_prompt: list[int]) -> Trajectory:
        """The episode, its traces with the episode's reward and group and its facts; an episode that made no model
        call is one trace of `empty_prompt` with no response, marked `harness_error` (never lost). An episode the
        infrastructure failed has reward 0 and every trace out of the loss (`Trajectory.mark_infra_failure`)."""
        with ep.lock:
            traj = ep.trajectory or Trajectory(prompt_ids=list(empty_prompt), group_id=ep.group_id,
                                               task_id=ep.task_id, info={"turns": 0})
            failure = ep.failure or (None if ep.trajectory else "harness_error")
            if ep.trajectory is None:
                ep.info.setdefault("harness_error", "the harness made no model call")
            facts = {"won": False, "truncated": False, "void_turn": False, "num_tool_calls": 0, **ep.info}
            traj.info = {**facts, **traj.info, "episode_id": ep.episode_id, "prefix_breaks": ep.prefix_breaks}
            traj.info["turns"] = sum(len(trace.turn_spans) for trace in traj.traces)
            traj.grade(0.0 if failure else reward)
            if failure:
                traj.mark_infra_failure(failure)
            return traj
