"""The sampler's top-k / top-p truncation replayed on the trainer's own logits, so that π_θ and μ are the same kind
of distribution and every ratio π/μ is 1 when the weights agree.

The engines report log μ of the truncated distribution they sampled from: log-softmax over the kept set K_μ
(vLLM's `processed_logprobs`; agents/engines/sampling.py states the rule). The full softmax of the trainer would
put the kept mass M = Σ_{i∈K} p_i into every ratio (π_full/μ = M < 1 at zero mismatch: TRL measured a mean ratio of
0.896 at top-p 0.8 on Qwen2.5-1.5B; prime-rl forces top-p 1 instead). Here the trainer selects its own kept set K
from its own logits z (already divided by the temperature) by the same rule and renormalizes over it:

    log π(y) = z_y − logsumexp_{i ∈ K ∪ {y}} z_i

Out of set: under mismatch (another dtype, stale weights, ALP's noise) the sampled token y can fall outside the
trainer's K although the sampler kept it. Its exact truncated log-prob would be −inf (ratio 0, no gradient, and a
non-finite log-prob every correction would have to mask). Instead y always counts as kept: K ∪ {y}. That is the
continuous extension across the boundary (a token just inside K has this very log-prob), keeps every log-prob
finite and small where the trainer would have dropped y, and leaves its gradient. How often it happens and how much
mass the trainer keeps are logged (`TruncationProbe`): `rollout_corr/truncation_mass`, mean M of the trainer's K
(without y) under its full softmax, and `rollout_corr/truncation_outside_frac`, the share of sampled tokens
outside K; both on the θ_old pass, over the sampled tokens (loss mask 1).

The set is chosen without gradient (it is piecewise constant in z); the gradient flows through z_y and the
logsumexp over the kept logits. Entropy diagnostics and the entropy bonus stay on the full distribution
(trainer/objective/logprobs.py `entropy_from_logits`).

Legend: B rows, T response positions, V vocabulary, N sampled tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from agents.engines.sampling import kept_threshold


@dataclass
class TruncatedLogprobs:
    """What one forward's replay gives, all (B, T) on the logits' device."""

    logp: Tensor  # log π over K ∪ {y}, with grad
    kept_mass: Tensor  # M: the trainer's K under its full softmax, no grad
    outside: Tensor  # bool: y ∉ K (counted in anyway)


def truncated_token_logprobs(logits: Tensor, token_ids: Tensor, *, top_p: float,
                             top_k: int) -> TruncatedLogprobs:
    """The module docstring's log π(y) for logits (B, T, V) already divided by the temperature, ids (B, T)."""
    threshold = kept_threshold(logits, top_p=top_p, top_k=top_k)  # (B, T, 1) the smallest kept logit
    picked = logits.gather(-1, token_ids[:, :, None])  # (B, T, 1) z_y
    outside = picked.detach() < threshold  # (B, T, 1)
    log_z_kept = logits.masked_fill(logits < threshold, float("-inf")).logsumexp(-1, keepdim=True)  # (B, T, 1)
    log_z = torch.where(outside, torch.logaddexp(log_z_kept, picked), log_z_kept)  # over K ∪ {y}
    with torch.no_grad():
        kept_mass = (log_z_kept - logits.logsumexp(-1, keepdim=True)).exp()  # (B, T, 1)
    return TruncatedLogprobs(logp=(picked - log_z).squeeze(-1), kept_mass=kept_mass.squeeze(-1),
                             outside=outside.squeeze(-1))


class TruncationProbe:
    """The truncation metrics of one pass over a batch (`trainer/objective/logprobs.py` old_logprobs): `add` each
    micro-batch's replay with its loss mask, `report` once. Nothing is observed, and nothing reported, when the
    sampler keeps every token."""

    def __init__(self) -> None:
        self.mass: list[Tensor] = []  # (N_i,) per micro-batch
        self.outside: list[Tensor] = []

    def add(self, trunc: TruncatedLogprobs, mask: Tensor) -> None:
        """trunc's tensors and mask (b, T): only sampled tokens (mask > 0) count."""
        m = mask.to(trunc.kept_mass.device) > 0  # (b, T)
        self.mass.append(trunc.kept_mass[m].double().cpu())
        self.outside.append(trunc.outside[m].double().cpu())

    def report(self) -> dict[str, float]:
        """`rollout_corr/truncation_mass` and `rollout_corr/truncation_outside_frac` (module docstring); {} when
        nothing was observed."""
        mass = torch.cat(self.mass) if self.mass else torch.zeros(0)
        if not mass.numel():
            return {}
        return {"rollout_corr/truncation_mass": mass.mean().item(),
                "rollout_corr/truncation_outside_frac": torch.cat(self.outside).mean().item()}
