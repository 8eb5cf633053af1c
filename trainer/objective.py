"""The per-micro-batch objective: policy loss from the registry + entropy term, aggregated.

`update.py` calls `micro_batch_objective` for each micro-batch of a mini-batch; everything that decides
*what* is optimized (loss choice, hyperparameters, correction weights) lives here, driven by
`AlgoConfig` fields only (presets fill them; nothing branches on a preset's name).

Legend: b rows of the micro-batch, T response positions.
"""

from __future__ import annotations

import torch

from trainer.config import AlgoConfig
from trainer.losses import aggregate, get_policy_loss, masked_mean
from trainer.types import Batch


def loss_kwargs(algo: AlgoConfig) -> dict:
    """Flat hyperparameters for the registry entry (no config objects inside components)."""
    return {"clip_low": algo.clip_low, "clip_high": algo.clip_high, "clip_dual": algo.clip_dual}


def micro_batch_objective(algo: AlgoConfig, sub: Batch, logp: torch.Tensor, entropy: torch.Tensor, *,
                          n_tokens: torch.Tensor, n_seqs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of one micro-batch (its share of the mini-batch loss) and its metrics.

    logp, entropy: (b, T) from the update forward; `sub` carries old_logp, rollout_logp, advantages,
    loss_mask (b, T). `n_tokens` / `n_seqs` are the mini-batch denominators.
    """
    loss_fn = get_policy_loss(algo.policy_loss)
    per_token, metrics = loss_fn(logp, sub.old_logp, sub.rollout_logp, sub.advantages, sub.loss_mask,
                                 **loss_kwargs(algo))
    loss = aggregate(per_token, sub.loss_mask, algo.loss_agg, n_tokens=n_tokens, n_seqs=n_seqs)
    if algo.entropy_coef:
        loss = loss - algo.entropy_coef * aggregate(entropy, sub.loss_mask, algo.loss_agg,
                                                    n_tokens=n_tokens, n_seqs=n_seqs)
    metrics["entropy_update"] = masked_mean(entropy.detach(), sub.loss_mask).item()
    return loss, metrics
