"""Episode-level metrics of a rollout batch (`rollout/*`) and metric-dict helpers.

Token-level mismatch diagnostics (`rollout_corr/*`, `ratio/*`) live in `trainer/diagnostics/mismatch_metrics.py`.
"""

from __future__ import annotations

import statistics
from typing import Any

from agents.trajectory import Trajectory


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Episode statistics of one rollout batch (its episodes: lengths count every trace of one)."""
    def mean(key: str) -> float:
        return statistics.fmean(float(t.info.get(key, 0)) for t in trajs)

    return {
        "rollout/reward": statistics.fmean(t.reward for t in trajs),
        "rollout/success": mean("won"),
        "rollout/turns": mean("turns"),
        "rollout/tool_calls": mean("num_tool_calls"),
        "rollout/void_turn_frac": mean("void_turn"),
        "rollout/truncated_frac": mean("truncated"),
        # closed the message (eos, end-of-turn token) on a tool call, which is never run: reward 0 (agents/rollout.py)
        "rollout/unrun_tool_call_frac": mean("unrun_tool_call"),
        "rollout/sandbox_errors": float(sum(bool(t.info.get("sandbox_error")) for t in trajs)),  # episodes, masked
        "rollout/invalid_actions": mean("invalid_actions"),  # commands not admissible as written (household/WebShop)
        "rollout/response_len": statistics.fmean(t.episode_response_len for t in trajs),
        "rollout/sampled_tokens": statistics.fmean(t.episode_sampled_tokens for t in trajs),
        # rows an episode makes (agents/trajectory.py): 1 unless a stripped history, a compaction or a harness's
        # prefix break started new traces
        "rollout/traces_per_episode": statistics.fmean(len(t.traces) for t in trajs),
        # env.context: compactions an episode, and the prompt tokens they took out (agents/templates/history.py)
        "rollout/compactions": statistics.fmean(t.info.get("trace_starts", {}).get("compaction", 0) for t in trajs),
        "rollout/compacted_tokens": mean("compacted_tokens"),
    }


def mean_of(records: list[dict[str, Any]]) -> dict[str, float]:
    """Average metric dicts (e.g. over the mini-batches of one step)."""
    keys = {k for r in records for k in r}
    return {k: statistics.fmean(r[k] for r in records if k in r) for k in sorted(keys)}
