"""The terms every policy loss is built from: the ±20 log-ratio bound, masked arithmetic, PPO's dual-clip surrogate
and the detached correction weights.

They live apart from the registry (trainer/objective/losses.py) so that a module of losses beside it
(trainer/objective/offpolicy_losses.py) can use them and the registry can import that module without a circle;
losses.py imports them back, so `from trainer.objective.losses import masked_mean` keeps working.

Legend: B trajectories, T response positions. `mask` is the loss mask m (1 only on sampled tokens).
"""

from __future__ import annotations

import torch
from torch import Tensor

LOG_RATIO_CLAMP = 20.0  # e^20 ≈ 4.9e8: the ±20 safety bound used by verl before exp


def masked_fill_zero(x: Tensor, mask: Tensor) -> Tensor:
    """x where m = 1, exactly 0 elsewhere (also when x is NaN/inf there, unlike x·m)."""
    return torch.where(mask > 0, x, torch.zeros_like(x))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """verl's masked mean Σ m·x / (Σ m + 1e-8)."""
    return (x * mask).sum() / (mask.sum() + 1e-8)


def dual_clip_surrogate(log_ratio: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float,
                        clip_high: float, clip_dual: float | None) -> tuple[Tensor, dict[str, float]]:
    """PPO dual-clip surrogate for any ratio with grad (arXiv 1912.09729; verl compute_policy_loss_vanilla).

    log_ratio, advantages, mask: (B, T). Returns per-token loss (B, T) and clip metrics.
    """
    if clip_dual is not None and clip_dual <= 1.0:
        raise ValueError(f"clip_dual (dual-clip constant c) must be > 1, got {clip_dual}")
    log_ratio = masked_fill_zero(log_ratio, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio) * mask  # (B, T); r = 0 where m = 0
    loss1 = -advantages * ratio
    loss2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(loss1, loss2)  # (B, T)
    if clip_dual is not None:
        loss3 = -advantages * clip_dual
        per_token = torch.where(advantages < 0, torch.minimum(clipped, loss3), clipped)
    else:
        per_token = clipped
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        high = ((advantages > 0) & (ratio > 1 + clip_high)).to(m.dtype)  # (B, T)
        low = ((advantages < 0) & (ratio < 1 - clip_low)).to(m.dtype)
        dual = ((advantages < 0) & (ratio > clip_dual)).to(m.dtype) if clip_dual is not None else 0 * m
        outside = ((ratio < 1 - clip_low) | (ratio > 1 + clip_high)).to(m.dtype)
        metrics = {
            "clip_high": masked_mean(high, m).item(),
            "clip_low": masked_mean(low, m).item(),
            "clip_dual": masked_mean(dual, m).item(),
            "pg_clipfrac": masked_mean(high + low, m).item(),  # verl: 1[L2 > L1]
            "pg_clipfrac_lower": masked_mean(dual, m).item(),  # verl's name for the dual-clip fraction
            "out_of_band": masked_mean(outside, m).item(),
            "ppo_kl": masked_mean(-log_ratio, m).item(),
            "ratio_mean": masked_mean(ratio, m).item(),
        }
    return masked_fill_zero(per_token, mask), metrics


def apply_weights(per_token: Tensor, weights: Tensor | None) -> Tensor:
    """ℓ ⊙ sg[w]: the per-token loss times the detached correction weights (B, T), itself if None."""
    return per_token if weights is None else per_token * weights.detach()
