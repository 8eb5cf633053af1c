"""A few episodes of a rollout batch as text: what the policy wrote, for a tracker's table (`logging.trackio`).

`EPISODE_TABLE_ROWS` episodes, evenly spaced over the batch so they come from different groups, each decoded from its
token ids with the run's tokenizer (special tokens left out, so a chat template's markers do not turn into HTML on a
dashboard): the prompt, the assistant turns (`Trajectory.turn_spans`), what came back between and after them (the
tool's output or the env's observation, with the template's glue), and the episode's reward.
"""

from __future__ import annotations

from typing import Any

from agents.trajectory import Trajectory

EPISODE_TABLE_ROWS = 4
"""Episodes per table: enough to see what the policy does, few enough to read on a dashboard."""
EPISODE_COLUMNS = ["prompt", "turns", "tool_outputs", "reward"]


def sampled_rows(n: int, rows: int = EPISODE_TABLE_ROWS) -> list[int]:
    """`rows` indices evenly spaced over a batch of `n` episodes (all of them when there are fewer)."""
    k = min(rows, n)
    return [i * n // k for i in range(k)]


def episode_segments(traj: Trajectory) -> tuple[list[list[int]], list[list[int]]]:
    """(turns, outputs): the token ids of each sampled assistant turn, and of each stretch of the response between
    or after them (what the tool or env answered, with the chat template's glue), in order, over every trace of the
    episode (agents/trajectory.py)."""
    turns, outputs = [], []
    for trace in traj.traces:
        prev = 0
        for start, end in trace.turn_spans:
            if start > prev:
                outputs.append(trace.response_ids[prev:start])
            turns.append(trace.response_ids[start:end])
            prev = end
        if prev < len(trace.response_ids):
            outputs.append(trace.response_ids[prev:])
    return turns, outputs


def _numbered(texts: list[str]) -> str:
    """`[1] ...\n\n[2] ...`: one paragraph per turn or output (Markdown on a dashboard)."""
    return "\n\n".join(f"[{i}] {text.strip()}" for i, text in enumerate(texts, 1))


def episode_table(trajectories: list[Trajectory], tokenizer: Any,
                  rows: int = EPISODE_TABLE_ROWS) -> list[list[Any]]:
    """One row (`EPISODE_COLUMNS`) per episode of `sampled_rows`, decoded with the run's `tokenizer`."""
    def text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    table = []
    for i in sampled_rows(len(trajectories), rows):
        traj = trajectories[i]
        turns, outputs = episode_segments(traj)
        table.append([text(traj.traces[0].prompt_ids).strip(), _numbered([text(t) for t in turns]),
                      _numbered([text(o) for o in outputs]), float(traj.reward)])
    return table
