"""Policy-loss registry: pure functions over `[B, T]` tensors.

Every entry has the signature

    fn(logp, old_logp, rollout_logp, advantages, mask, *, weights=None, **hyperparameters)
        -> (per_token_loss (B, T), metrics: dict[str, float])

and returns the *unaggregated* loss (already multiplied by detached correction weights); `aggregate`
reduces it. `POLICY_LOSSES` at the bottom is the only way to pick one.

Legend: B trajectories, T response positions. `mask` is the loss mask m (1 only on sampled tokens).
Notation follows shared reference/algorithms.md §1–§2.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

LOG_RATIO_CLAMP = 20.0  # e^20 ≈ 4.9e8: the ±20 safety bound used by verl before exp


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """verl's masked mean Σ m·x / (Σ m + 1e-8)."""
    return (x * mask).sum() / (mask.sum() + 1e-8)


def aggregate(per_token: Tensor, mask: Tensor, mode: str = "token-mean", *, n_tokens: float | None = None,
              n_seqs: float | None = None, norm_len: float | None = None) -> Tensor:
    """Reduce a (B, T) loss to a scalar (reference/algorithms.md §2.3).

    `n_tokens` / `n_seqs` are the mini-batch denominators when a mini-batch is split into micro-batches
    (so micro-batching cannot change the loss); by default the tensor's own counts are used.
    Empty rows (no valid token) never count.
    """
    if per_token.shape != mask.shape:
        raise ValueError(f"aggregate: loss shape {tuple(per_token.shape)} != mask shape {tuple(mask.shape)}")
    mask = mask.to(per_token.dtype)
    row_tokens = mask.sum(-1)  # (B,)
    nonempty = (row_tokens > 0).to(per_token.dtype)  # (B,)
    seqs = n_seqs if n_seqs is not None else nonempty.sum().clamp(min=1.0)
    if mode == "token-mean":
        tokens = n_tokens if n_tokens is not None else mask.sum().clamp(min=1.0)
        return (per_token * mask).sum() / tokens
    if mode == "seq-mean-token-mean":
        row = (per_token * mask).sum(-1) / row_tokens.clamp(min=1.0)  # (B,)
        return (row * nonempty).sum() / seqs
    if mode == "seq-mean-token-sum":
        return ((per_token * mask).sum(-1) * nonempty).sum() / seqs
    if mode == "seq-mean-token-sum-norm":
        if not norm_len:
            raise ValueError("aggregate: mode 'seq-mean-token-sum-norm' needs norm_len (the max response length)")
        return ((per_token * mask).sum(-1) * nonempty).sum() / (seqs * norm_len)
    raise ValueError(f"aggregate: unknown mode {mode!r}; valid: {', '.join(AGG_MODES)}")


AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def dual_clip_surrogate(log_ratio: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float,
                        clip_high: float, clip_dual: float | None) -> tuple[Tensor, dict[str, float]]:
    """PPO dual-clip surrogate for any ratio with grad (arXiv 1912.09729; verl compute_policy_loss_vanilla).

    log_ratio, advantages, mask: (B, T). Returns per-token loss (B, T) and clip metrics.
    """
    if clip_dual is not None and clip_dual <= 1.0:
        raise ValueError(f"clip_dual (dual-clip constant c) must be > 1, got {clip_dual}")
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
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
        metrics = {
            "clip_high": masked_mean(((advantages > 0) & (ratio > 1 + clip_high)).to(m.dtype), m).item(),
            "clip_low": masked_mean(((advantages < 0) & (ratio < 1 - clip_low)).to(m.dtype), m).item(),
            "clip_dual": (masked_mean(((advantages < 0) & (ratio > clip_dual)).to(m.dtype), m).item()
                          if clip_dual is not None else 0.0),
            "ppo_kl": masked_mean(-log_ratio, m).item(),
            "ratio_mean": masked_mean(ratio, m).item(),
        }
    return per_token * mask, metrics


def ppo_clip(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
             weights: Tensor | None = None, clip_low: float = 0.2, clip_high: float = 0.28,
             clip_dual: float | None = 3.0) -> tuple[Tensor, dict[str, float]]:
    """GRPO / PPO token-level clipped surrogate on r = exp(logp − old_logp) (reference §3.1).

    `rollout_logp` is unused here (no mismatch correction); `weights` (B, T) are detached correction
    weights applied to the per-token loss (1 if None).
    """
    per_token, metrics = dual_clip_surrogate(logp - old_logp, advantages, mask, clip_low=clip_low,
                                             clip_high=clip_high, clip_dual=clip_dual)
    if weights is not None:
        per_token = per_token * weights.detach()
    return per_token, metrics


POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    "ppo_clip": ppo_clip,
}


def get_policy_loss(name: str) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    """Look up a policy loss by name; unknown names raise with the valid choices."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; valid: {', '.join(sorted(POLICY_LOSSES))}") from None
