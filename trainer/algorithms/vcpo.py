"""VCPO — Variance Controlled Policy Optimization (arXiv 2602.17616; code github.com/mit-han-lab/vcpo): two controls
of the policy-gradient variance that stale rollouts inflate, neither of them a loss.

Both read the sequence importance weight of each episode, w_b = π_θold(y_b)/μ(y_b) = exp(Σ_t m (old_logp −
rollout_logp)) (`sequence_log_weights`), unclipped as the paper's scripts use it (`use_clipped: false`).

- ESS-scaled step (`algo.vcpo_lr_rule`), in the optimizer step (trainer/update.py `optimizer_step`): the mini-batch's
  effective sample size ratio ρ = ESS/N = (Σ_b w_b)² / (N·Σ_b w_b²) ∈ (0, 1] over its N episodes (summed over
  data-parallel ranks) sets the learning rate of the step, η_eff = η·√min(1, ρ/ρ0) — the paper's square-root rule
  for AdamW-style optimizers (`linear`: η·min(1, ρ/ρ0)). `scaled_lr` writes it into every param group for that one
  step and puts the configured lr back after, so the schedule never sees it; ρ, the scale and the lr are logged.
- Off-policy optimal baseline (`algo.advantage=opob`), in the advantage stage (trainer/objective/advantages.py
  `group_advantages`, its `log_weights`): b_g = Σ_i w_i²·‖∇ log π(τ_i)‖²·R_i / Σ_i w_i²·‖∇ log π(τ_i)‖² over the
  group, then A_i = (R_i − b_g)/std_g R, the closed-form baseline that minimizes the variance of the
  importance-weighted gradient without a critic.

Departures, stated: the baseline takes every episode's squared score-gradient norm as equal, b_g = Σ w_i² R_i /
Σ w_i²: VCPO's code measures ‖∇ log π(τ_i)‖² with one backward per trajectory into its own gradient buffers, which
alprl's batched micro-batch backward does not give without a backward per episode; with w ≡ 1 this baseline is
GRPO's group mean. The group std is GRPO's (Bessel) where VCPO's code divides by the population std: a factor
√((G−1)/G), constant for a fixed group size, i.e. a learning rate. The paper's loss setting (PPO's ratio with no
clip that acts, sequence TIS at 8, seq-mean-token-mean) is the `vcpo` preset's.

Legend: B trajectories of the rollout batch, b rows of a mini-batch, T response positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from trainer.config.algo_config import VCPO_LR_RULES, AlgoConfig
from trainer.objective.loss_terms import LOG_RATIO_CLAMP, masked_fill_zero
from trainer.objective.types import Batch, EpisodeRows


def sequence_log_weights(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor,
                         episodes: EpisodeRows | None = None) -> Tensor:
    """log w_b = ⟦Σ_t m (old_logp − rollout_logp)⟧, the sequence weight π_θold/μ of each row: (B, T) ×3 → (B,);
    with `episodes`, of each episode over all its rows (traces): (E,).

    Tokens of `mask` with a non-finite log-prob count as 0 (as `prepare_corrections` leaves them out of m′); a row
    without a token gets 0 (w = 1).
    """
    finite = (mask > 0) & torch.isfinite(old_logp) & torch.isfinite(rollout_logp)  # (B, T)
    per_row = masked_fill_zero(old_logp - rollout_logp, finite).sum(-1)  # (B,)
    total = per_row if episodes is None else episodes.sum(per_row)
    return total.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def ess_ratio(log_w: Tensor, rows: Tensor, batch_sum: Callable[[Tensor], Tensor] | None = None) -> float:
    """ρ = (Σ w)² / (N·Σ w²) over the rows where `rows` (B,) is true; log_w (B,). 1.0 when there is no row.

    `batch_sum` sums a tensor over data-parallel ranks (DistContext.all_reduce_sum), so ρ is the global mini-batch's;
    w ≤ e^20, so the sums stay exact enough in float64.
    """
    w = log_w.double().exp()[rows]  # (N,)
    sums = torch.stack([w.sum(), w.square().sum(), w.new_tensor(float(w.numel()))])  # on the batch's device
    total, square, n = (batch_sum(sums) if batch_sum is not None else sums).tolist()
    return 1.0 if n == 0 or square == 0 else total * total / (n * square)


def lr_multiplier(rho: float, rule: str, base: float) -> float:
    """The step's factor on the learning rate: √min(1, ρ/ρ0) (sqrt), min(1, ρ/ρ0) (linear), 1 (none)."""
    if rule == "none":
        return 1.0
    share = min(1.0, rho / base)
    if rule == "sqrt":
        return math.sqrt(share)
    if rule == "linear":
        return share
    raise ValueError(f"unknown algo.vcpo_lr_rule {rule!r}; valid: {', '.join(VCPO_LR_RULES)}")


def ess_lr_scale(algo: AlgoConfig, batch: Batch, rows: Tensor,
                 batch_sum: Callable[[Tensor], Tensor] | None = None) -> tuple[float | None, dict[str, float]]:
    """(the lr factor of the mini-batch `rows`' step, its metrics); (None, {}) when `algo.vcpo_lr_rule` is none.

    The weights are those of the prepared batch (old_logp, rollout_logp, corr_keep), so every rank and micro-batch
    split sees the same ρ.
    """
    if algo.vcpo_lr_rule == "none":
        return None, {}
    keep = batch.corr_keep[rows]  # (b, T) m′
    log_w = sequence_log_weights(batch.old_logp[rows], batch.rollout_logp[rows], keep)  # (b,)
    rho = ess_ratio(log_w, keep.sum(-1) > 0, batch_sum)
    scale = lr_multiplier(rho, algo.vcpo_lr_rule, algo.vcpo_base_ess)
    return scale, {"actor/ess_ratio": rho, "actor/lr_scale": scale}


@contextmanager
def scaled_lr(optimizer: torch.optim.Optimizer, scale: float | None) -> Iterator[dict[str, float]]:
    """Every param group's lr times `scale` inside the block, the configured lrs back after it (also on an error);
    yields {"actor/lr": the first group's lr in the block}, {} when `scale` is None (nothing is touched)."""
    if scale is None:
        yield {}
        return
    configured = [group["lr"] for group in optimizer.param_groups]
    for group, lr in zip(optimizer.param_groups, configured, strict=True):
        group["lr"] = lr * scale
    try:
        yield {"actor/lr": optimizer.param_groups[0]["lr"]}
    finally:
        for group, lr in zip(optimizer.param_groups, configured, strict=True):
            group["lr"] = lr
