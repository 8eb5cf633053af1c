"""Masks that take off-policy data out of the loss, beside the correction weights of trainer/objective/corrections.py.

- OPSM (DeepSeek-V3.2's off-policy sequence masking; slime `--use-opsm`, TRL `off_policy_mask_threshold`): a
  sequence with a negative advantage whose mean log-ratio of the sampler to the current policy,
  mean_t(log μ − sg(log π_θ)), exceeds δ leaves the policy loss; it stays in the denominators and in the KL term,
  as in both stacks. Per micro-batch, since it reads the current policy (`algo.opsm_delta`, off when null).
- M2PO (arXiv 2510.01161, AReaL `actor.m2_threshold`): the tokens with the largest second moment of the
  sampler-trainer log-ratio, (log μ − log π_old)², leave m′ greedily, largest first, until the mean of the rest
  is below the threshold. Once per rollout batch (it does not read π_θ), like the rejection of rollout_rs.

Legend: B rows, T response positions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.objective.losses import masked_fill_zero


def opsm_keep(logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
              delta: float) -> tuple[Tensor, dict[str, float]]:
    """(keep (B, 1) ∈ {0, 1}, metrics): 0 for rows with A < 0 and mean_t(log μ − log π_θ) > δ over the mask.

    logp (B, T) the current policy (detached here), rollout_logp μ, advantages (B, T) (a row's sign: its first
    masked token's), mask (B, T)."""
    m = mask > 0
    tokens = m.sum(-1)  # (B,)
    gap = masked_fill_zero(rollout_logp.double() - logp.detach().double(), mask).sum(-1) / tokens.clamp(min=1)
    negative = (masked_fill_zero(advantages, mask).sum(-1) < 0)  # (B,) A is one value per row (or per turn)
    masked = negative & (gap > delta) & (tokens > 0)  # (B,)
    rows = tokens > 0
    metrics = {"opsm_masked_seq_frac": masked[rows].float().mean().item() if rows.any() else 0.0,
               "opsm_masked_token_frac": (tokens * masked).sum().item() / max(tokens.sum().item(), 1)}
    return (~masked).to(mask.dtype)[:, None], metrics


def m2po_keep(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, *,
              threshold: float) -> tuple[Tensor, dict[str, float]]:
    """(keep (B, T) ∈ {0, 1}, `m2po/*` metrics): the greedy second-moment mask over the tokens of `mask`.

    With M2 = (log μ − log π_old)² sorted from the largest, the k largest leave, k the smallest count whose
    remaining mean is below `threshold` (at most all but one token, as AReaL)."""
    valid = (mask > 0) & torch.isfinite(old_logp) & torch.isfinite(rollout_logp)  # (B, T)
    keep = valid.to(mask.dtype)
    m2 = (rollout_logp.double() - old_logp.double()).square()[valid]  # (N,)
    n = m2.numel()
    if n == 0:
        return keep, {"m2po/m2": 0.0, "m2po/m2_after": 0.0, "m2po/masked_frac": 0.0}
    ordered, order = torch.sort(m2, descending=True, stable=True)
    suffix_mean = ordered.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=torch.float64)  # mean of [k:]
    below = (suffix_mean < threshold).nonzero()
    k = int(below[0]) if below.numel() else n - 1
    dropped = torch.zeros(n, dtype=torch.bool)
    dropped[order[:k]] = True
    flat = keep[valid]
    flat[dropped] = 0
    keep[valid] = flat
    metrics = {"m2po/m2": m2.mean().item(), "m2po/m2_after": ordered[k:].mean().item(), "m2po/masked_frac": k / n}
    return keep, metrics
