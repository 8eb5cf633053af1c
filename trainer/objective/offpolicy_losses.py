"""2026's off-policy losses beside the registry's older ones: VESPO's kernel on the sequence ratio, and the two
prefix-ratio losses, MinPRO and CTPO. Each entry has the registry's one signature (trainer/objective/losses.py, whose
`POLICY_LOSSES` names them) and returns the unaggregated (B, T) loss with its metrics.

Why prefixes. The exact off-policy correction of token t's policy-gradient term is the prefix ratio
Π_{i≤t} ρ_i: the odds of reaching the token's context, times the token's own ratio. Token-level PPO keeps only ρ_t,
and the sequence ratio Π_{i≤T} ρ_i over-corrects with a variance that grows with the length. A prefix runs over the
row's sampled tokens only (m = 1): tool and observation tokens between turns have no ratio and are no position.

- VESPO (arXiv 2602.10693; its code FloyedShen/VESPO recipe/vespo/code/core_algos.py, TRL `loss_type="vespo"`):
  W_b = Π_t (π_θ/π_θold)_bt · w_bt, φ(W) = W^k·e^{λ(1−W)} (k, λ by the sign of A), ℓ = −sg[φ(W_b)]·A·log π_θ.
- MinPRO (arXiv 2601.22718) [R]: the prefix Π_{i<t} ρ_i replaced by its smallest factor min_{i<t} ρ_i.
- CTPO (arXiv 2605.07331; its code horizon-llm/CTPO, loss `cum-token-cumprod-la`): PPO's dual clip on the
  cumulative ratio exp(Σ_{i≤t} Δ_i), clipped in log space within bounds that grow as t^p.

Departures, stated:
- VESPO: the detached correction weights w (`algo.correction`; 1 where none) are folded into W, as the paper's code
  folds verl's rollout IS weights and TRL its vLLM ratio, instead of multiplying ℓ; so the preset's token TIS
  (TRL's `token_truncate`, C 3) makes W = Π_t r_upd·min(v, 3). log W is clamped to ±20 (TRL: [log 1e-8, 20]). k
  and λ follow the sign of each token's advantage (A ≥ 0: the _pos pair, as both codes), the same along a row
  unless GiGPO gives turns their own advantages.
- MinPRO's method body was not retrieved here (its abstract and summaries were: "a non-cumulative surrogate based on
  the minimum token-level ratio observed in the preceding prefix", which down-weights a token's gradient when any
  earlier ratio is small). Implemented: M_t = min_{i<t} ρ_i (1 on a row's first sampled token),
  ℓ_t = sg[M_t]·ℓ_dc(ρ_t; ε_lo, ε_hi, c), PPO's dual clip on the token's own ratio, ρ = π_θ/μ against the sampler,
  the paper's "sampling policy" (under a policy lag and an engine mismatch both lie between μ and π_θ). Choices
  the abstract does not fix: the strict prefix (i < t), M not capped at 1, M detached (a gradient through the
  current token only, as CTPO's stop-gradient form), the clip and its values (GRPO's ε 0.2/0.28, c 3).
- CTPO as its code: Δ clamped to ±20 per token before the prefix sum, the cumulative log-ratio capped above at
  10, positions counted over sampled tokens (its code's cumsum of the response mask).

Legend: B trajectories, T response positions. `mask` is the loss mask m (1 only on sampled tokens).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.objective.loss_terms import (
    LOG_RATIO_CLAMP,
    apply_weights,
    dual_clip_surrogate,
    masked_fill_zero,
    masked_mean,
)

CTPO_LOG_RATIO_MAX = 10.0  # CTPO's code caps the cumulative log-ratio at 10 before exp (as verl's GSPO)
WEIGHT_FLOOR = 1e-8  # a folded correction weight of 0 (a masked token) counts as 1e-8: log W stays finite


def nonempty_rows(values: Tensor, mask: Tensor) -> Tensor:
    """Per-row values (B, 1) → those of the S rows with a sampled token (S,)."""
    return values[:, 0][mask.sum(-1) > 0]


def vespo(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
          weights: Tensor | None = None, vespo_k_pos: float, vespo_lambda_pos: float, vespo_k_neg: float,
          vespo_lambda_neg: float) -> tuple[Tensor, dict[str, float]]:
    """VESPO (arXiv 2602.10693, the closed-form reshaping kernel): ℓ = −sg[φ(W_b)]·A·log π_θ, φ(W) = W^k·e^{λ(1−W)}.

    W_b = exp⟦Σ_t m (logp − old_logp + log w)⟧ is the row's sequence ratio π_θ/π_θold (a product, no length
    normalization) times its folded correction weights w (B, T) (module docstring); k, λ = vespo_k_pos,
    vespo_lambda_pos where A ≥ 0, else the _neg pair. φ(1) = 1, so on-policy the gradient is REINFORCE's
    −A·∇log π_θ; φ peaks at W = k/λ and falls as e^{−λW} beyond. `rollout_logp` is unused. Shapes (B, T).
    """
    delta = masked_fill_zero(logp - old_logp, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    log_w = torch.zeros_like(delta)
    if weights is not None:
        log_w = masked_fill_zero(weights.detach().clamp(min=WEIGHT_FLOOR).log(), mask)  # (B, T)
    with torch.no_grad():
        seq_upd = delta.sum(-1, keepdim=True)  # (B, 1) log Π_t r_upd
        log_big_w = (seq_upd + log_w.sum(-1, keepdim=True)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, 1)
        positive = advantages >= 0  # (B, T)
        k = torch.where(positive, torch.full_like(delta, vespo_k_pos), torch.full_like(delta, vespo_k_neg))
        lam = torch.where(positive, torch.full_like(delta, vespo_lambda_pos), torch.full_like(delta, vespo_lambda_neg))
        phi = torch.exp(lam + k * log_big_w - lam * log_big_w.exp())  # (B, T) = W^k·e^{λ(1 − W)}
    per_token = masked_fill_zero(-phi * advantages * masked_fill_zero(logp, mask), mask)  # (B, T)
    with torch.no_grad():
        m = mask.to(delta.dtype)
        big_w = nonempty_rows(log_big_w.exp(), mask)  # (S,)
        upd = nonempty_rows(seq_upd.clamp(max=LOG_RATIO_CLAMP).exp(), mask)  # (S,) sequence r_upd
        sampled = phi[mask > 0]
        metrics = {"vespo_w_mean": big_w.mean().item() if big_w.numel() else 1.0,
                   "vespo_phi_mean": masked_mean(phi, m).item(),
                   "vespo_phi_max": sampled.max().item() if sampled.numel() else 1.0,
                   "ppo_kl": masked_mean(-delta, m).item(),
                   "ratio_mean": upd.mean().item() if upd.numel() else 1.0}
    return per_token, metrics


def prefix_min_log_ratio(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """log M_t = min_{i<t, m_i = 1} log ρ_i for every position (B, T); 0 (M = 1) where no sampled token precedes.

    log_ratio (B, T) must be clamped to ±20 already: masked positions are filled with +20, so they are never the
    minimum of a prefix that holds a sampled token.
    """
    top = torch.full_like(log_ratio, LOG_RATIO_CLAMP)
    inclusive = torch.where(mask > 0, log_ratio, top).cummin(-1).values  # (B, T) min over i ≤ t
    before = torch.cat([top[:, :1], inclusive[:, :-1]], dim=-1)  # (B, T) min over i < t
    seen = (mask.cumsum(-1) - mask) > 0  # (B, T) a sampled token precedes t
    return torch.where(seen, before, torch.zeros_like(before))


def minpro(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
           weights: Tensor | None = None, clip_low: float, clip_high: float,
           clip_dual: float | None) -> tuple[Tensor, dict[str, float]]:
    """MinPRO [R] (arXiv 2601.22718, Minimum Prefix Ratio): ℓ_t = sg[min_{i<t} ρ_i]·ℓ_dc(ρ_t), ρ = π_θ/μ.

    The prefix ratio Π_{i<t} ρ_i of the exact correction becomes its smallest factor M_t (1 on the first sampled
    token), a non-cumulative weight that cannot blow up with the length and shrinks a token's gradient once any
    earlier token has become unlikely; the token's own ratio ρ_t = exp⟦logp − rollout_logp⟧ goes through PPO's
    dual clip (ε_lo, ε_hi, c). `old_logp` is unused; `weights` (B, T) multiply as for every clipped loss.
    """
    log_rho = masked_fill_zero(logp - rollout_logp, mask)  # (B, T), grad through logp
    log_m = prefix_min_log_ratio(log_rho.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), mask)  # (B, T)
    prefix = log_m.exp() * mask  # (B, T) M_t, detached
    per_token, metrics = dual_clip_surrogate(log_rho, advantages, mask, clip_low=clip_low, clip_high=clip_high,
                                             clip_dual=clip_dual)
    m = mask.to(prefix.dtype)
    metrics |= {"minpro_prefix_mean": masked_mean(prefix, m).item(),
                "minpro_prefix_below_half": masked_mean((prefix < 0.5).to(m.dtype), m).item()}
    return apply_weights(per_token * prefix, weights), metrics


def ctpo(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
         weights: Tensor | None = None, ctpo_clip_low: float, ctpo_clip_high: float, ctpo_clip_dual: float,
         ctpo_power: float) -> tuple[Tensor, dict[str, float]]:
    """CTPO (arXiv 2605.07331, CTPO-LA): PPO's dual clip on the cumulative token ratio, clipped in log space.

    log r_t = sg[S_t] + logp_t − sg[logp_t] with S_t = Σ_{i≤t} m_i ⟦logp_i − old_logp_i⟧ (capped above at 10), so
    token t carries its prefix's ratio and its gradient is ∇log π(y_t). With s_t = t^ctpo_power (t counts the
    row's sampled tokens): log r clipped to [−ctpo_clip_low·s_t, ctpo_clip_high·s_t], and for A < 0 the loss capped
    at −A·exp(ctpo_clip_dual·s_t) — bounds that widen as the cumulative log-ratio's spread grows, ∝ √t.
    `rollout_logp` is unused; the mismatch enters through `weights` (B, T) (the preset's sequence TIS, C 5).
    """
    if min(ctpo_clip_low, ctpo_clip_high, ctpo_clip_dual) <= 0:
        raise ValueError("ctpo needs log-space bounds > 0, got algo.ctpo_clip_low/high/dual = "
                         f"{ctpo_clip_low}/{ctpo_clip_high}/{ctpo_clip_dual}")
    delta = masked_fill_zero(logp - old_logp, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    cum = delta.detach().cumsum(-1)  # (B, T) S_t
    log_r = masked_fill_zero(cum + delta - delta.detach(), mask).clamp(max=CTPO_LOG_RATIO_MAX)  # (B, T)
    scale = mask.cumsum(-1).clamp(min=1.0).pow(ctpo_power)  # (B, T) s_t = t^p
    low, high = -ctpo_clip_low * scale, ctpo_clip_high * scale  # (B, T) log-space bounds
    ratio = log_r.exp() * mask
    clipped = torch.minimum(torch.maximum(log_r, low), high).exp() * mask  # (B, T)
    loss = torch.maximum(-advantages * ratio, -advantages * clipped)
    dual = torch.exp(ctpo_clip_dual * scale)  # (B, T) the dual-clip constant c_t
    per_token = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual), loss)
    with torch.no_grad():
        m = mask.to(delta.dtype)
        above = ((advantages > 0) & (log_r > high)).to(m.dtype)  # (B, T)
        below = ((advantages < 0) & (log_r < low)).to(m.dtype)
        dual_hit = ((advantages < 0) & (ratio > dual)).to(m.dtype)
        metrics = {"clip_high": masked_mean(above, m).item(), "clip_low": masked_mean(below, m).item(),
                   "clip_dual": masked_mean(dual_hit, m).item(), "pg_clipfrac": masked_mean(above + below, m).item(),
                   "ctpo_cum_ratio_mean": masked_mean(ratio, m).item(), "ctpo_scale_mean": masked_mean(scale, m).item(),
                   "ppo_kl": masked_mean(-delta, m).item(), "ratio_mean": masked_mean(delta.exp(), m).item()}
    return apply_weights(masked_fill_zero(per_token, mask), weights), metrics
