"""`rollout_corr/full_vocab_kl`: the sampler-vs-trainer KL over the whole vocabulary at the sampled positions.

The other mismatch metrics (`rollout_corr/kl`, `k3_kl`) compare the two only at the token each position sampled; a
bug that moves probability among the tokens not sampled (a wrong LM-head row, a stale packed weight, a bad
top-p set) stays invisible to them for many steps. SkyRL #2201 compared the full distributions at matched weights;
a sampler reports only a few log-probs per position, so here the sampler's k most probable tokens S
(`rollout.logprobs_topk` = k; vLLM's `SamplingParams(logprobs=k)`, the transformers engine's own top-k) and one
tail bucket for the rest of the vocabulary stand for its distribution μ:

    KL(μ ‖ π) ≈ Σ_{v∈S} μ_v (log μ_v − log π_v) + μ_T log(μ_T / π_T),   μ_T = 1 − Σ_{v∈S} μ_v,  π_T = 1 − Σ_{v∈S} π_v

Merging the tail into one bucket can only lose divergence (the log-sum inequality), so the estimate is a lower
bound of the exact KL, exact when S covers the sampler's support (top-k sampling with k ≤ `rollout.logprobs_topk`).
π is the trainer's θ_old at the sampler's temperature with the sampler's truncation replayed on its own logits
(agents/engines/sampling.py), S always counted in its kept set, as trainer/objective/truncation.py counts in the
sampled token: a token the sampler kept and the trainer would drop gets its small finite probability, not −inf.
The metric is the mean over sampled tokens (loss mask 1), computed on the θ_old pass (no extra forward).

Legend: b rows, T response positions, V vocabulary, k sampler's top-k, N sampled tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agents.engines.sampling import keeps_all, kept_threshold

TAIL_FLOOR = 1e-12
"""π_T is at least this, so a tail the trainer leaves empty gives a large finite KL, not inf (float64)."""


def topk_tail_kl(mu_logp: Tensor, pi_logp: Tensor) -> Tensor:
    """The module docstring's KL per position: mu_logp, pi_logp (..., k) the sampler's and the trainer's log-probs
    at the sampler's top-k ids (−inf in mu_logp where it reported fewer) → (...), in float64."""
    mu_logp, pi_logp = mu_logp.double(), pi_logp.double()
    present = torch.isfinite(mu_logp)
    mu = torch.where(present, mu_logp.exp(), 0.0)  # (..., k)
    pi = torch.where(present, pi_logp.exp(), 0.0)
    head = torch.where(present, mu * (mu_logp - pi_logp), 0.0).sum(-1)  # (...)
    mu_tail = (1 - mu.sum(-1)).clamp(min=0.0)
    pi_tail = (1 - pi.sum(-1)).clamp(min=TAIL_FLOOR)
    tail = torch.where(mu_tail > 0, mu_tail * (mu_tail.clamp(min=TAIL_FLOOR).log() - pi_tail.log()), 0.0)
    return head + tail


@torch.no_grad()
def trainer_topk_logprobs(logits: Tensor, ids: Tensor, present: Tensor, *, top_p: float, top_k: int) -> Tensor:
    """log π at `ids` (b, T, k) from logits (b, T, V) already divided by the temperature: the sampler's truncation
    replayed, with the `present` (b, T, k) ids counted in the kept set → (b, T, k)."""
    if keeps_all(top_p, top_k):
        return logits.log_softmax(-1).gather(-1, ids)
    kept = logits >= kept_threshold(logits, top_p=top_p, top_k=top_k)  # (b, T, V)
    kept = kept.scatter(-1, ids, kept.gather(-1, ids) | present)
    return logits.masked_fill(~kept, float("-inf")).log_softmax(-1).gather(-1, ids)


class FullVocabKL:
    """Collects the KL of every sampled position over one pass (the θ_old log-probs, trainer/loop.py `prepare_batch`):
    `add_logits` each micro-batch's logits, `report` once. Nothing is reported when the batch holds no top-k."""

    def __init__(self, top_p: float, top_k: int) -> None:
        self.top_p, self.top_k = top_p, top_k
        self.kl: list[Tensor] = []  # (N_i,) per micro-batch

    def add_logits(self, logits: Tensor, batch) -> None:
        """logits (b, T, V) of the micro-batch `batch` (a `Batch`, with its rollout_topk_* fields)."""
        if batch.rollout_topk_ids is None:
            return
        device = logits.device
        mu_logp = batch.rollout_topk_logp.to(device)  # (b, T, k)
        present = torch.isfinite(mu_logp)
        pi_logp = trainer_topk_logprobs(logits.detach(), batch.rollout_topk_ids.to(device), present,
                                        top_p=self.top_p, top_k=self.top_k)
        m = (batch.loss_mask.to(device) > 0) & present.any(-1)  # (b, T) sampled positions with a top-k
        self.kl.append(topk_tail_kl(mu_logp, pi_logp)[m].cpu())

    def report(self) -> dict[str, float]:
        kl = torch.cat(self.kl) if self.kl else torch.zeros(0)
        return {"rollout_corr/full_vocab_kl": kl.mean().item()} if kl.numel() else {}
