"""The frozen reference policy of the KL term (`algo.kl_coef` > 0), as verl's ref worker and TRL's ref model.

The reference is the run's starting policy (`model.path`, else the SFT warm start), loaded once in eval mode
with gradients off; a resumed run loads the same start, not its checkpoint, so the KL keeps its anchor. Its
log-probs come from one no-grad forward per rollout batch, beside the θ_old pass (same micro-batches, same
temperature, same replay of the sampler's top-k / top-p). Two uses (`AlgoConfig`):

- loss term (verl use_kl_loss): `trainer/update.py` micro_batch_objective adds β·agg(KL(π_θ ‖ π_ref), m′) with the estimator
  `kl_type`, on the update forward's log-probs (under ALP the perturbed ones, as the loss itself);
- reward penalty (verl use_kl_in_reward): each episode's reward loses β·Σ_t KL_t over its sampled tokens, with
  KL_t from θ_old against the reference, before the group advantages (`kl_reward_penalty`).

Legend: B rows, T response positions.
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.config.algo_config import AlgoConfig
from trainer.objective.logprobs import clean_forward
from trainer.objective.losses import kl_penalty, masked_fill_zero, masked_mean
from trainer.objective.types import Batch, EpisodeRows


def frozen(model: nn.Module) -> nn.Module:
    """`model` in eval mode with every parameter's gradient off."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@torch.no_grad()
def reference_logprobs(reference: nn.Module, batch: Batch, temperature: float, micro_batch_size: int, *,
                       top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """π_ref log-probs of the batch's response tokens, (B, T), under the sampler's truncation `top_p` / `top_k`
    replayed on the reference's own logits, as π_θ's are (trainer/objective/truncation.py)."""
    return clean_forward(reference, batch, temperature, micro_batch_size, top_p=top_p, top_k=top_k)[0]


@torch.no_grad()
def kl_reward_penalty(algo: AlgoConfig, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
    """(rewards − β·Σ_t KL_t (B,), metrics): KL_t of θ_old against the reference on the sampled tokens, summed over
    each row's whole episode (all its traces), so every trace carries the episode's one penalized reward."""
    m = batch.loss_mask
    kl = masked_fill_zero(kl_penalty(batch.old_logp, masked_fill_zero(batch.ref_logp, m), kind=algo.kl_type,
                                       old_logp=batch.old_logp), m)  # (B, T); k3_is at θ_old is k3
    per_episode = EpisodeRows.of(batch.episode_index, len(batch)).total(kl.sum(-1))  # (B,)
    return batch.rewards - algo.kl_coef * per_episode, {
        "rollout/kl_ref": masked_mean(kl, m).item(), "rollout/kl_penalty": (algo.kl_coef * per_episode).mean().item()}
