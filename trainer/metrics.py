"""Per-step metrics computed from a Batch (detached, fp32, only tokens with m = 1).

Keys are namespaced: `rollout/*` (episode facts), `rollout_corr/*` (rollout–training mismatch, verl's
definitions, reference/algorithms.md §4). Legend: B trajectories, T response positions.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from agents.trajectory import Trajectory
from trainer.losses import LOG_RATIO_CLAMP, masked_mean
from trainer.types import Batch


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Episode statistics of one rollout batch."""
    def mean(key: str) -> float:
        return statistics.fmean(float(t.info.get(key, 0)) for t in trajs)

    return {
        "rollout/reward": statistics.fmean(t.reward for t in trajs),
        "rollout/success": mean("won"),
        "rollout/turns": mean("turns"),
        "rollout/tool_calls": mean("num_tool_calls"),
        "rollout/void_turn_frac": mean("void_turn"),
        "rollout/truncated_frac": mean("truncated"),
        "rollout/response_len": statistics.fmean(len(t.response_ids) for t in trajs),
        "rollout/sampled_tokens": statistics.fmean(t.num_sampled_tokens for t in trajs),
    }


@torch.no_grad()
def mismatch_metrics(batch: Batch) -> dict[str, float]:
    """Rollout vs trainer (θ_old, unperturbed) on sampled tokens: KL estimators and perplexities.

    kl_k1 = mean_m(rollout_logp − old_logp), kl_k3 = mean_m(e^Δ − Δ − 1) with Δ = old_logp − rollout_logp:
    both estimate KL(μ‖π_train) from samples of μ (http://joschu.net/blog/kl-approx.html).
    """
    m = batch.loss_mask
    delta = (batch.old_logp - batch.rollout_logp) * m  # (B, T)
    k3 = torch.exp(delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) - delta - 1
    n_b = m.sum(-1)  # (B,)
    rows = n_b > 0
    mean_old = (batch.old_logp * m).sum(-1)[rows] / n_b[rows]  # (B',)
    mean_roll = (batch.rollout_logp * m).sum(-1)[rows] / n_b[rows]
    p_tr, p_ro = torch.exp(batch.old_logp)[m > 0], torch.exp(batch.rollout_logp)[m > 0]
    return {
        "rollout_corr/kl": masked_mean(-delta, m).item(),
        "rollout_corr/k3_kl": masked_mean(k3, m).item(),
        "rollout_corr/training_ppl": torch.exp(-mean_old).mean().item() if rows.any() else 0.0,
        "rollout_corr/rollout_ppl": torch.exp(-mean_roll).mean().item() if rows.any() else 0.0,
        "rollout_corr/log_ppl_diff": (mean_roll - mean_old).mean().item() if rows.any() else 0.0,
        "training/rollout_probs_diff_mean": (p_tr - p_ro).abs().mean().item() if len(p_tr) else 0.0,
        "training/rollout_probs_diff_max": (p_tr - p_ro).abs().max().item() if len(p_tr) else 0.0,
    }


def mean_of(records: list[dict[str, Any]]) -> dict[str, float]:
    """Average metric dicts (e.g. over the mini-batches of one step)."""
    keys = {k for r in records for k in r}
    return {k: statistics.fmean(r[k] for r in records if k in r) for k in sorted(keys)}
