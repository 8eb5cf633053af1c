"""How far one rollout batch's mini-batch steps moved the policy, measured after the last of them.

One no-grad forward at the updated weights of `diagnostics.rows` rows (whole groups, evenly spaced over the
batch), clean (no perturbation) and in eval mode like the old-log-prob pass, so that π_θ and π_θold differ only
by the update:

- `diag/policy_kl_k1`, `diag/policy_kl_k3`: KL(π_θold ‖ π_θ) on the sampled tokens, whose samples come from
  μ ≈ π_θold; with r = π_θ/π_θold, k1 = mean(−log r) and k3 = mean(r − 1 − log r) (unbiased, k3 ≥ 0;
  http://joschu.net/blog/kl-approx.html). `actor/ppo_kl` is the same k1 inside each mini-batch's forward, before
  its own step, so it misses the last step (and is perturbed under ALP).
- `diag/entropy`: mean entropy of π_θ over the sampled tokens, after the update, without noise
  (`actor/entropy_update` is the update forward's, noised under ALP).
- `quatro/realized_kl*` (with `algo.quatro_delta`): the per-query KL the update realized, against δ.

Legend: B rows, T response positions, N sampled tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.algorithms.quatro import realized_kl_metrics
from trainer.config.algo_config import AlgoConfig
from trainer.diagnostics.ratio_diagnostics import group_sample
from trainer.objective.logprobs import clean_forward
from trainer.objective.losses import LOG_RATIO_CLAMP
from trainer.objective.types import Batch


@torch.no_grad()
def policy_kl(new_logp: Tensor, old_logp: Tensor, mask: Tensor) -> dict[str, float]:
    """k1 and k3 estimates of KL(π_θold ‖ π_θ) on the sampled tokens; new_logp, old_logp, mask (B, T)."""
    m = (mask > 0) & torch.isfinite(new_logp) & torch.isfinite(old_logp)  # (B, T)
    if not m.any():
        return {}
    log_r = (new_logp.double() - old_logp.double())[m].clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (N,)
    return {"diag/policy_kl_k1": (-log_r).mean().item(),
            "diag/policy_kl_k3": (log_r.exp() - 1 - log_r).mean().item()}


def policy_drift(model: nn.Module, batch: Batch, algo: AlgoConfig, temperature: float, micro_batch_size: int,
                 max_rows: int = 0, *, top_p: float = 1.0, top_k: int = 0) -> dict[str, float]:
    """The module docstring's metrics for `batch` (needs `batch.old_logp`) at the model's current weights, on
    whole groups of at most `max_rows` rows (0: all); π_θ replays the sampler's truncation `top_p` / `top_k` as
    `old_logp` did, and the entropy is the full distribution's."""
    rows = group_sample(batch.group_ids, max_rows)
    if len(rows) < len(batch):
        batch = batch.select(rows)
    new_logp, entropy = clean_forward(model, batch, temperature, micro_batch_size, with_entropy=True, top_p=top_p,
                                      top_k=top_k)  # (R, T)
    out = policy_kl(new_logp, batch.old_logp, batch.loss_mask)
    m = batch.loss_mask > 0
    if m.any():
        out["diag/entropy"] = entropy[m].double().mean().item()
    return out | realized_kl_metrics(algo, batch, new_logp)
