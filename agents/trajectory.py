"""The unit of RL data: one multi-turn episode as the sampler produced it, token-in/token-out, as one or more traces.

**Episodes and traces.** A trace is one prompt and every token that followed it as sampled: one row of the training
batch. An episode is one trace as long as every later turn's prompt extends the token stream; a turn whose prompt
does not (a thinking template that drops earlier `<think>` blocks under `env.think_history=strip`, a context
compaction under `env.context`, a harness that edited its history) starts a new trace, whose prompt is exactly what
the model was given for that turn. The reward, the group and every group statistic belong to the episode; each trace
carries the episode's reward, group and advantage (docs/architecture.md, "Episodes of traces", says what each loss
makes of a trace). The `Trajectory` a driver returns is the episode: it holds its current (last) trace's tokens and,
in `earlier`, the traces before it; `traces` lists them all in order. Episode-wide writers (`grade`,
`shape_reward`, `regroup`, `mask_out`, `mark_infra_failure`) reach every trace.

Defined here (not in trainer/) because imports point one way (sandbox ← envs ← agents ← evaluation ←
trainer) and `agents/rollout.py` is the only place that builds it. `trainer/objective/types.py` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Trajectory:
    """One episode. Lists are aligned over the R response positions.

    prompt_ids:       (P,) chat-formatted prompt token ids (system + user + assistant header).
    response_ids:     (R,) every token after the prompt: sampled assistant tokens and appended
                      observation tokens, exactly as produced (never re-tokenized).
    loss_mask:        (R,) 1 where the policy sampled the token, 0 for observation/tool tokens; 0
                      everywhere in an episode the rollout masked out (`info["loss_masked"]`).
    rollout_logprobs: (R,) the engine's log-prob of each sampled token under the sampling
                      distribution actually used; 0.0 where loss_mask is 0.
    rollout_topk:     (≤ R,) with `rollout.logprobs_topk` > 0: the sampler's most probable token ids and their
                      log-probs at each position (`GenerationResult.topk`), ([], []) at observation tokens;
                      shorter than R (empty without top-k) where the positions after it hold none.
    token_versions:   (R,) the policy version that sampled each token (the trainer's update count whose weights
                      the engine held, `Engine.weight_version`); -1 at observation tokens.
    reward:           scalar outcome reward of the episode, written only through `grade` (the driver that
                      ended the episode) and `shape_reward` (a shaping term added later, e.g. DAPO's).
    group_id:         trajectories sharing a task (GRPO group) share this id; set at construction, changed
                      only through `regroup`.
    info:             plain-Python episode facts (won, turns, void_turn, truncated, tool calls, ...).

    Per turn, aligned over the N turns the policy took (step-level credit, e.g. GiGPO's anchor states):
    turn_spans:       (N,) [start, end) response positions of turn n's sampled tokens (the observation that
                      follows lies outside it).
    turn_states:      (N,) `state_key` of the state turn n acted on: the env's first observation for n = 0, then
                      step n − 1's `info["anchor_obs"]` where given, else its observation. Equal keys within a
                      group are the same state.

    The fields above but reward, group_id, task_id and info are this trace's (the episode's last); an episode's turns
    are its traces' turns in order.
    earlier:          the episode's traces before this one, oldest first (empty for an append-only episode); each
                      holds its own tokens, turns and `info["trace_start"]` (why it began; "" for the first).
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    rollout_topk: list[tuple[list[int], list[float]]] = field(default_factory=list)
    token_versions: list[int] = field(default_factory=list)
    reward: float = 0.0
    group_id: int = 0
    task_id: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_states: list[str] = field(default_factory=list)
    earlier: list[Trajectory] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        """The trajectory `dataclasses.asdict` gave `d` of, its earlier traces rebuilt too (a saved batch)."""
        return cls(**{**d, "earlier": [cls.from_dict(e) for e in d.get("earlier", [])]})

    @property
    def traces(self) -> list[Trajectory]:
        """The episode's traces in order, this one last: the rows it makes in a batch (`collate`)."""
        return [*self.earlier, self]

    def start_trace(self, prompt_ids: list[int], reason: str) -> None:
        """Begin a new trace whose prompt is `prompt_ids` (the prompt the model is given for its next turn, which
        does not extend this trace's tokens): the tokens so far move into a trace of `earlier`, and this trajectory
        goes on with an empty response. `reason` is one of `TRACE_STARTS`; `info["traces"]` counts the traces and
        `info["trace_starts"]` the reasons."""
        if reason not in TRACE_STARTS:
            raise ValueError(f"start_trace: unknown reason {reason!r}; valid: {', '.join(TRACE_STARTS)}")
        done = Trajectory(prompt_ids=self.prompt_ids, response_ids=self.response_ids, loss_mask=self.loss_mask,
                          rollout_logprobs=self.rollout_logprobs, rollout_topk=self.rollout_topk,
                          token_versions=self.token_versions, reward=self.reward, group_id=self.group_id,
                          task_id=self.task_id, turn_spans=self.turn_spans, turn_states=self.turn_states,
                          info={"trace": len(self.earlier), "trace_start": self.info.get("trace_start", "")})
        self.earlier.append(done)
        self.prompt_ids, self.response_ids, self.loss_mask, self.rollout_logprobs = list(prompt_ids), [], [], []
        self.rollout_topk, self.token_versions = [], []
        self.turn_spans, self.turn_states = [], []
        self.info["trace"] = len(self.earlier)
        self.info["trace_start"] = reason
        self.info["traces"] = len(self.earlier) + 1
        starts = self.info.setdefault("trace_starts", {})
        starts[reason] = starts.get(reason, 0) + 1

    def append(self, token_ids: list[int], logprobs: list[float] | None,
               topk: list[tuple[list[int], list[float]]] | None = None, version: int = 0) -> None:
        """Append sampled tokens (with their log-probs, the sampler's top-k at each and the policy version that
        sampled them) or, with `logprobs=None`, observation tokens."""
        if topk is not None:  # the positions before (observations) hold none
            self.rollout_topk.extend([([], [])] * (len(self.response_ids) - len(self.rollout_topk)))
            self.rollout_topk.extend(topk)
        self.response_ids.extend(token_ids)
        self.token_versions.extend([-1 if logprobs is None else int(version)] * len(token_ids))
        if logprobs is None:
            self.loss_mask.extend([0] * len(token_ids))
            self.rollout_logprobs.extend([0.0] * len(token_ids))
        else:
            if len(logprobs) != len(token_ids):
                raise ValueError(f"append: {len(token_ids)} tokens but {len(logprobs)} log-probs")
            self.loss_mask.extend([1] * len(token_ids))
            self.rollout_logprobs.extend(float(x) for x in logprobs)

    def append_turn(self, token_ids: list[int], logprobs: list[float], state: str,
                    topk: list[tuple[list[int], list[float]]] | None = None, version: int = 0) -> None:
        """Append one sampled turn (sampled by policy `version`) and record its span and the state key it acted
        on."""
        start = len(self.response_ids)
        self.append(token_ids, logprobs, topk, version)
        self.turn_spans.append((start, len(self.response_ids)))
        self.turn_states.append(state)

    def grade(self, reward: float) -> None:
        """The episode's outcome reward, set once it ended by what drove it (agents/rollout.py, the policy
        endpoint's recorder and harness source); every trace carries it."""
        for trace in self.traces:
            trace.reward = float(reward)

    def shape_reward(self, delta: float, reason: str) -> None:
        """Add a shaping term to the graded reward (DAPO's overlong punishment); `info["reward_shaping"][reason]`
        keeps each term, so the episode's own outcome stays readable."""
        for trace in self.traces:
            trace.reward += delta
        shaping = self.info.setdefault("reward_shaping", {})
        shaping[reason] = shaping.get(reason, 0.0) + delta

    def regroup(self, group_id: int) -> None:
        """Move the episode to another GRPO group (DAPO renumbers the groups it keeps; a harness's later samples
        join their episode's group)."""
        for trace in self.traces:
            trace.group_id = group_id

    def mask_out(self, reason: str) -> None:
        """Leave the whole episode out of the loss: mask 0 and rollout log-prob 0.0 on every token (the invariant
        above), `info["loss_masked"]` set and `info["masked_by"]` naming why. Its reward stays; whether it counts in
        its group's baseline is trainer/objective/infra_failures.py's call (yes, unless the infrastructure failed
        it). The one writer of an episode-wide mask (the rollout's infrastructure failures and void turns, DAPO's
        overlong filter, the lone valid member of a group left without a baseline)."""
        for trace in self.traces:
            trace.loss_mask = [0] * len(trace.response_ids)
            trace.rollout_logprobs = [0.0] * len(trace.response_ids)
        self.info["loss_masked"] = True
        self.info["masked_by"] = reason

    def mask_stale(self, current: int, max_gap: int) -> tuple[int, int]:
        """Leave out of the loss the sampled tokens more than `max_gap` policy versions older than `current` (mask
        0, rollout log-prob 0.0); returns (tokens masked, sampled tokens). The one writer of a token-level mask
        after sampling (`rollout.max_token_version_gap`, trainer/algorithms/staleness.py)."""
        masked = sampled = 0
        for trace in self.traces:
            for i, (kept, version) in enumerate(zip(trace.loss_mask, trace.token_versions, strict=False)):
                if not kept:
                    continue
                sampled += 1
                if current - version > max_gap:
                    trace.loss_mask[i], trace.rollout_logprobs[i] = 0, 0.0
                    masked += 1
        if masked:
            self.info["stale_masked"] = self.info.get("stale_masked", 0) + masked
        return masked, sampled

    def mark_infra_failure(self, reason: str) -> None:
        """The episode's outcome is not the policy's: `info["infra_failure"]` = reason (one of
        `INFRA_FAILURE_REASONS`) and out of the loss (`mask_out(reason)`). Called by agents/rollout.py and the
        policy endpoint's recorder (agents/endpoint/recorder.py) only, once the episode has ended, with reward 0
        (the driver, which writes rewards, ended it so); the run's `rollout.infra_failures` decides what its group
        makes of it."""
        if reason not in INFRA_FAILURE_REASONS:
            raise ValueError(f"mark_infra_failure: unknown reason {reason!r}; "
                             f"valid: {', '.join(INFRA_FAILURE_REASONS)}")
        self.info["infra_failure"] = reason
        self.mask_out(reason)

    @property
    def infra_failure(self) -> str | None:
        """Why the infrastructure failed this episode (`mark_infra_failure`), or None."""
        return self.info.get("infra_failure")

    @property
    def num_sampled_tokens(self) -> int:
        """Sampled tokens of this trace."""
        return sum(self.loss_mask)

    @property
    def episode_sampled_tokens(self) -> int:
        """Sampled tokens of the whole episode, every trace."""
        return sum(t.num_sampled_tokens for t in self.traces)

    @property
    def episode_response_len(self) -> int:
        """Response tokens (sampled and appended) of the whole episode, every trace."""
        return sum(len(t.response_ids) for t in self.traces)


TRACE_STARTS = ("think_strip", "compaction", "prefix_break")
"""Why a trace begins after an episode's first (`Trajectory.start_trace`): the chat template dropped earlier
thinking from the next turn's prompt (`env.think_history=strip`); the context was compacted (`env.context`); a
harness sent the policy endpoint a prompt that does not extend the episode's tokens."""


INFRA_FAILURE_REASONS = ("sandbox_error", "engine_error", "context_overflow", "episode_timeout", "harness_error")
"""Why an episode's outcome is not the policy's (agents/rollout.py says when each applies): a tool call the sandbox
could not run after the client's retries; the engine failed the episode's request; the context filled on tokens the
policy did not sample (the prompt, a tool's output or an env page); the rollout call's wall-clock limit; a user's
harness (`rollout.source=harness`) that raised, returned no reward or sent the policy endpoint a request it refused
(agents/endpoint/harness.py)."""


ANCHOR_OBS_KEY = "anchor_obs"
"""Step-info key under which an env (or wrapper) gives the observation that identifies the state, when the text it
shows the agent adds context that is not part of the state (verl-agent's `anchor_obs`); without it the observation
itself is the state."""


def state_key(observation: str) -> str:
    """The key of an env observation as a state: its text with whitespace runs collapsed (the envs render a state
    deterministically, so equal states give equal text; layout whitespace is not part of the state)."""
    return " ".join(observation.split())
