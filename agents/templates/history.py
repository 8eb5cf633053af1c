"""What the model is shown for its next turn when that is not the token stream so far: the rules that start a new
trace of an episode (agents/trajectory.py), applied by the rollout driver after each env step (agents/rollout.py).

Two rules, one per episode format (a TIR style under a chat template, the household's and the shop's command lines):

**`env.think_history=strip`** (assistant turns of their own: hermes under a template with tool turns). The next
turn's prompt is the chat template's rendering of the conversation so far: the agent's opening messages, each
sampled turn as an assistant message (its text as decoded, thinking included: the template drops it where it drops
it) and each tool result as a `tool` message, with the generation prompt (`agents.control_tokens.chat_prompt_ids`).
Where the rendering's text extends the stream's text (Qwen3's template within one question: thinking is dropped
only before the last user message), the episode goes on in the same trace, as sampled: the ids stay the engine's
and the observation ids the tool-turn template's. Where it does not (QwQ's and DeepSeek-R1's drop every earlier
turn's thinking), the rendering's ids are the next trace's prompt, token for token what the template gives, and the
turns that follow are sampled from it. Texts, not ids, decide: a re-encoding may merge tokens across a boundary
where the stream appended ids separately, which is no rewrite of history.

**`env.context`** (one assistant message per episode: the TIR styles simpletir and torl, hermes without tool turns,
the household and the shop). When the stream and the next turn's room (`max_new_tokens`) pass `env.context_budget`
tokens, the history is compacted into a new prompt of at most `target_tokens` (half the budget, or less where the
next turn's room needs it), built from ids the episode already has: the episode's opening prompt, then the rounds
(a sampled turn and the observation after it) that are kept, as they were sampled and appended. What goes:
- `sliding`: the oldest rounds, replaced by one line saying how many (a sliding window, verl's and NeMo-RL's);
- `drop_tool_outputs`: the oldest observations' contents first, each replaced by a short line, then, if that is not
  enough, the oldest rounds as `sliding` (verl's ContextManager's tool-output truncation);
- `summarize`: the oldest rounds, replaced by a summary of their text written by `env.summarizer` (a user function
  `module:function`, text → text) or, with none, by the policy itself (its greedy answer to a summary request).
The marker, the dropped-output line and the summary are shown as the agent shows an observation (the household's
"> " prompt follows them). A history that cannot be brought under the budget (the opening prompt and the last round
alone are too long) is left as it is: the episode runs into the context as it would without compaction.

Chat-turn episodes are not compacted (a compacted chat needs the template to render what was dropped, which the
rules above do not do), and one-message episodes have nothing to strip: config validation refuses both in one line
(`history_refusal`).

Legend: ids are token id lists; a round is (turn ids, observation ids).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.control_tokens import chat_prompt_ids
from agents.engines.base import GenerationRequest
from agents.trajectory import Trajectory

CONTEXT_POLICIES = {
    "none": "the whole history stays in the prompt; an episode that fills the context ends there",
    "sliding": "the oldest rounds go, replaced by a line saying how many",
    "drop_tool_outputs": "the oldest observations' contents go first, then the oldest rounds",
    "summarize": "the oldest rounds become a summary (env.summarizer, or the policy itself)",
}
"""`env.context` choices; the module docstring states each."""
DROPPED_OUTPUT = "[output dropped to fit the context]"
SUMMARY_REQUEST = "Summarize the steps below in a few sentences: what was tried and what was found."
SUMMARY_TOKENS = 64
"""New tokens the policy may spend on a summary (`env.summarizer` empty)."""


def dropped_rounds_line(n: int) -> str:
    return f"[{n} earlier step{'s' if n != 1 else ''} dropped to fit the context]"


def summary_line(summary: str) -> str:
    return f"Summary of the earlier steps: {summary.strip()}"


Summarizer = Callable[[str], str]


def load_summarizer(spec: str) -> Summarizer:
    """`module:function` (importable, or a module in the working directory) → the function; one clear error else."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f"env.summarizer={spec!r}: expected module:function (a text → text function)")
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # a user's module beside the run, as `python -m` would find it
        sys.path.append(cwd)
    try:
        fn = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"env.summarizer={spec!r}: cannot load it ({err}); give an importable module:function") from err
    if not callable(fn):
        raise ValueError(f"env.summarizer={spec!r} is not callable")
    return fn


@dataclass(frozen=True)
class HistoryPolicy:
    """How later prompts are built (the run's `env.think_history`, `env.context`, `env.context_budget`,
    `env.summarizer`); `HistoryPolicy()` is append-only: every turn extends the stream."""

    think_history: str = "keep"
    context: str = "none"
    context_budget: int = 0
    """Tokens of prompt + response past which the history is compacted (with `context` other than none; 0: the
    engine's max_model_len)."""
    summarizer: str = ""

    @property
    def append_only(self) -> bool:
        return self.think_history == "keep" and self.context == "none"


def target_tokens(budget: int, max_new_tokens: int) -> int:
    """The size a compaction brings the prompt down to: half the budget, so that several turns follow before the next
    one, and never so much that the next turn has no room."""
    return max(min(budget // 2, budget - max_new_tokens), 0)


@dataclass
class EpisodeHistory:
    """What the rules read of one episode beside its trajectory: the opening messages and prompt, and (for strip)
    each tool result's content as the model was shown it."""

    messages: list[dict[str, str]]
    opening: list[int]
    tool_contents: list[str] = field(default_factory=list)


def rounds_of(traj: Trajectory, pending: list[int] | None = None) -> list[tuple[list[int], list[int]]]:
    """The episode's rounds, every trace's, in order: each turn's sampled ids and the appended ids after it (up to
    the next turn of its trace); `pending`: the observation ids of the last turn, not appended yet."""
    rounds = []
    for trace in traj.traces:
        spans = trace.turn_spans
        for n, (start, end) in enumerate(spans):
            stop = spans[n + 1][0] if n + 1 < len(spans) else len(trace.response_ids)
            rounds.append((trace.response_ids[start:end], trace.response_ids[end:stop]))
    if pending and rounds:
        rounds[-1] = (rounds[-1][0], rounds[-1][1] + list(pending))
    return rounds


class HistoryRules:
    """The rules of one rollout call (`policy`) over its agent; `next_prompt` is asked after every env step that
    lets an episode go on."""

    def __init__(self, policy: HistoryPolicy, agent: Any, engine_context: int, max_new_tokens: int,
                 summarize: Summarizer | None = None):
        self.policy, self.agent = policy, agent
        self.budget = policy.context_budget or engine_context
        self.max_new_tokens = max_new_tokens
        self.summarize = summarize

    def start(self, first_obs: str, info: dict[str, Any], prompt_ids: list[int]) -> EpisodeHistory | None:
        """The history an episode's rules read (None when the policy is append-only)."""
        if self.policy.append_only:
            return None
        messages = self.agent.messages(first_obs) if self.policy.think_history == "strip" else []
        return EpisodeHistory(messages, list(prompt_ids))

    def record_observation(self, history: EpisodeHistory, obs: str, cap: int) -> None:
        """An observation the episode goes on after, capped at `cap` tokens as the rollout appended it."""
        if self.policy.think_history == "strip":
            history.tool_contents.append(self.agent.shown_tool_content(obs, cap))

    def next_prompt(self, traj: Trajectory, history: EpisodeHistory,
                    obs_ids: list[int]) -> tuple[list[int], str] | None:
        """The prompt of the episode's next turn and why, when it does not extend the stream (the trace so far and
        `obs_ids`, the observation the rollout would append); None when it does. A new trace's prompt holds the
        observation, so the trace before it ends at its last sampled turn."""
        if self.policy.think_history == "strip":
            return self._stripped(traj, history, obs_ids)
        if self.policy.context != "none":
            return self._compacted(traj, history, obs_ids)
        return None

    def _stripped(self, traj: Trajectory, history: EpisodeHistory,
                  obs_ids: list[int]) -> tuple[list[int], str] | None:
        messages = list(history.messages)
        decode = self.agent.tokenizer.decode
        for (turn, _), content in zip(rounds_of(traj), history.tool_contents, strict=True):
            # the turn as the model wrote it, thinking included (the end-of-turn token is the template's to write)
            messages.append({"role": "assistant", "content": decode(turn, skip_special_tokens=True)})
            messages.append({"role": "tool", "content": content})
        rendered = self.agent.render_prompt_ids(messages)
        if decode(rendered) == decode(traj.prompt_ids + traj.response_ids + obs_ids):
            return None  # the template keeps this history as it was sampled: the trace goes on
        return rendered, "think_strip"

    def _compacted(self, traj: Trajectory, history: EpisodeHistory,
                   obs_ids: list[int]) -> tuple[list[int], str] | None:
        shown = len(traj.prompt_ids) + len(traj.response_ids) + len(obs_ids)
        if shown + self.max_new_tokens <= self.budget:
            return None
        target = target_tokens(self.budget, self.max_new_tokens)
        rounds = rounds_of(traj, obs_ids)
        as_observation = self.agent.observation_ids  # a line or summary, shown as the agent shows output
        size = len(history.opening) + sum(len(t) + len(o) for t, o in rounds)
        if self.policy.context == "drop_tool_outputs":  # oldest outputs first, never the last one
            dropped_line = as_observation(DROPPED_OUTPUT)
            for n in range(len(rounds) - 1):
                if size <= target:
                    break
                turn, obs = rounds[n]
                if len(obs) > len(dropped_line):  # the line is shorter than what it replaces
                    size += len(dropped_line) - len(obs)
                    rounds[n] = (turn, dropped_line)
        dropped = 0
        while dropped < len(rounds) - 1 and size > target:  # the latest round stays
            size -= sum(map(len, rounds[dropped]))
            dropped += 1
        head = list(history.opening)
        if dropped:
            if self.policy.context == "summarize":
                text = self.agent.tokenizer.decode([i for r in rounds[:dropped] for part in r for i in part],
                                                   skip_special_tokens=True)
                head += as_observation(summary_line(self._summary(text)))
            else:
                head += as_observation(dropped_rounds_line(dropped))
        prompt = head + [i for r in rounds[dropped:] for part in r for i in part]
        if len(prompt) + self.max_new_tokens > self.budget or len(prompt) >= shown:
            return None  # nothing gained: the episode runs into the context as without compaction
        return prompt, "compaction"

    def _summary(self, text: str) -> str:
        if self.summarize is None:
            raise ValueError("env.context=summarize needs a summarizer (env.summarizer, or the policy's engine)")
        return self.summarize(text)


def policy_summarizer(engine: Any, agent: Any, stop_token_ids: list[int]) -> Summarizer:
    """`env.summarizer` empty: the policy writes the summary, greedily, from a one-message request of its own chat
    template (`SUMMARY_REQUEST` and the dropped text), at most `SUMMARY_TOKENS` tokens."""
    def summarize(text: str) -> str:
        prompt = chat_prompt_ids(agent.tokenizer, [{"role": "user", "content": f"{SUMMARY_REQUEST}\n\n{text}"}])
        room = max(min(SUMMARY_TOKENS, engine.max_model_len - len(prompt)), 0)
        if not room:
            return ""
        (future,) = engine.submit([GenerationRequest(prompt, room, [], list(stop_token_ids))], greedy=True)
        return agent.tokenizer.decode(future.result().token_ids, skip_special_tokens=True)

    return summarize
