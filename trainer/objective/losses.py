"""Policy-loss registry: pure functions over `[B, T]` tensors.

Every entry has the signature

    fn(logp, old_logp, rollout_logp, advantages, mask, *, weights=None, **hyperparameters)
        -> (per_token_loss (B, T), metrics: dict[str, float])

and returns the *unaggregated* loss (already multiplied by detached correction weights, which VESPO folds into its
sequence ratio instead); `aggregate` reduces it. `POLICY_LOSSES` at the bottom is the only way to pick one. Its
entries are defined here, but VESPO's sequence kernel and the prefix-ratio losses (MinPRO, CTPO), which live in
trainer/objective/offpolicy_losses.py; both modules are built from trainer/objective/loss_terms.py (the ±20 bound,
masked arithmetic, PPO's dual clip).

Keyword hyperparameters carry the names of `AlgoConfig` fields (`trainer/update.py` loss_kwargs fills them by
name) and state no default: the config, filled by a preset of configs/algorithms/, is their one source. Rollout-mismatch corrections (TIS / MIS, reference §3.2) are not separate losses: they are the
detached `weights` (and the rejection mask passed as `mask`) computed once per rollout batch by
`trainer/objective/corrections.py`, so any entry combines with any correction (e.g. Token-MIS = `ppo_clip` with
`upd_level=token` + seq MIS weights; Seq-ALP = `bypass` with `upd_level=seq` + perturbed `logp`).

Ratio levels (reference §1): token `Δ_bt`; seq = product `S_b = Σ_t m Δ_bt`; geo = `S_b / n_b`. Sequence
values are broadcast in the stop-gradient form `sg[S_b] + logp_bt − sg[logp_bt]` (GSPO-token form), then
clamped to ±20 before exp. Guards: masked positions are replaced by 0 before any arithmetic, so NaN/inf
log-probs on tokens with m = 0 can never leak into the loss.

Legend: B trajectories, T response positions. `mask` is the loss mask m (1 only on sampled tokens).
Notation follows shared reference/algorithms.md §1–§2.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch
from torch import Tensor

from trainer.objective.loss_terms import (
    LOG_RATIO_CLAMP,
    apply_weights,
    dual_clip_surrogate,
    masked_fill_zero,
    masked_mean,
)
from trainer.objective.offpolicy_losses import ctpo, minpro, vespo

GSPO_LOG_RATIO_MAX = 10.0  # verl compute_policy_loss_gspo bounds log s from above at 10
RATIO_LEVELS = ("token", "seq", "geo")
KL_KINDS = ("k1", "kl", "k2", "mse", "k3", "low_var_kl", "k3_is")


def level_log_ratio(delta: Tensor, mask: Tensor, level: str) -> Tensor:
    """Per-token log-ratio at `level` (token | seq | geo), in stop-gradient form for seq/geo.

    delta = logp − denominator (B, T), grad through logp only. seq: sg[S_b] + Δ_bt − sg[Δ_bt] with
    S_b = Σ_t m Δ_bt, so every token carries the sequence value and ∂/∂θ = ∇ log π(y_bt); geo uses
    S_b / max(n_b, 1). Returns (B, T), 0 where m = 0 (not yet clamped).
    """
    delta = masked_fill_zero(delta, mask)  # (B, T)
    if level == "token":
        return delta
    total = delta.sum(-1, keepdim=True)  # (B, 1): S_b
    if level == "geo":
        total = total / mask.sum(-1, keepdim=True).clamp(min=1.0)  # (B, 1): S̄_b
    elif level != "seq":
        raise ValueError(f"unknown ratio level {level!r}; valid: {', '.join(RATIO_LEVELS)}")
    return masked_fill_zero(total.detach() + delta - delta.detach(), mask)  # (B, T)


def aggregate(per_token: Tensor, mask: Tensor, mode: str, *, n_tokens: float | None = None,
              n_seqs: float | None = None, norm_len: float | None = None, seq_tokens: Tensor | None = None) -> Tensor:
    """Reduce a (B, T) loss to a scalar (reference/algorithms.md §2.3).

    `n_tokens` / `n_seqs` are the mini-batch denominators when a mini-batch is split into micro-batches
    (so micro-batching cannot change the loss); by default the tensor's own counts are used. `norm_len`
    is seq-mean-token-sum-norm's constant T_norm (the configured max response length).
    Empty rows (no valid token) never count.

    A sequence is an episode: with rows that are traces of one episode (agents/trajectory.py), `n_seqs` counts
    episodes and `seq_tokens` (B,) gives each row its episode's tokens of m (trainer/objective/types.py
    `row_seq_tokens`), so seq-mean-token-mean takes the mean over the episode's tokens, one term per episode
    (default: each row its own sequence).
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
        denominator = row_tokens if seq_tokens is None else seq_tokens.to(per_token.dtype)  # (B,)
        row = (per_token * mask).sum(-1) / denominator.clamp(min=1.0)  # (B,) a row's share of its sequence's mean
        return (row * nonempty).sum() / seqs
    if mode == "seq-mean-token-sum":
        return ((per_token * mask).sum(-1) * nonempty).sum() / seqs
    if mode == "seq-mean-token-sum-norm":
        # Dr.GRPO (arXiv 2503.20783; reference §2.3): token sums over a constant length, then the mean over
        # sequences; verl 0.8 agg_loss omits the 1/B′, so its scale would grow with the batch
        if not norm_len or norm_len <= 0:
            raise ValueError("aggregate: mode 'seq-mean-token-sum-norm' needs norm_len > 0 (the configured max "
                             f"response length), got {norm_len}")
        return ((per_token * mask).sum(-1) * nonempty).sum() / (seqs * norm_len)
    raise ValueError(f"aggregate: unknown mode {mode!r}; valid: {', '.join(AGG_MODES)}")


AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def ppo_clip(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
             weights: Tensor | None = None, clip_low: float, clip_high: float, clip_dual: float | None,
             upd_level: str) -> tuple[Tensor, dict[str, float]]:
    """GRPO / decoupled PPO dual-clip on the update ratio r = π_θ/π_θold (reference §3.1, §3.2).

    upd_level token: r_bt = exp⟦logp − old_logp⟧ (GRPO, arXiv 2402.03300); seq: product of token ratios in
    stop-grad form (Seq-MIS's update ratio); geo: geometric mean. `rollout_logp` is unused (the
    mismatch enters only through `weights` (B, T), detached TIS/MIS weights, 1 if None).
    """
    log_ratio = level_log_ratio(logp - old_logp, mask, upd_level)  # (B, T)
    per_token, metrics = dual_clip_surrogate(log_ratio, advantages, mask, clip_low=clip_low,
                                             clip_high=clip_high, clip_dual=clip_dual)
    return apply_weights(per_token, weights), metrics


def bypass(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
           weights: Tensor | None = None, clip_low: float, clip_high: float, clip_dual: float | None,
           upd_level: str) -> tuple[Tensor, dict[str, float]]:
    """Bypass / ALP: one ratio against the inference policy, r = π_θ(,δ)/μ (reference §3.3, §3.5).

    `old := rollout`: log r = ⟦logp − rollout_logp⟧ at `upd_level` (token: Token-Bypass/Token-ALP; seq:
    stop-grad product, Seq-Bypass/Seq-ALP, arXiv 2603.19470). With ALP, `logp` comes from the perturbed
    forward; the loss itself is the same, so ALP with σ ≡ 0 is Bypass exactly. `old_logp` is unused.
    """
    log_ratio = level_log_ratio(logp - rollout_logp, mask, upd_level)  # (B, T)
    per_token, metrics = dual_clip_surrogate(log_ratio, advantages, mask, clip_low=clip_low,
                                             clip_high=clip_high, clip_dual=clip_dual)
    return apply_weights(per_token, weights), metrics


def gspo(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
         weights: Tensor | None = None, clip_low: float, clip_high: float) -> tuple[Tensor, dict[str, float]]:
    """GSPO (arXiv 2507.18071 eq. 5–7; verl compute_policy_loss_gspo), reference §3.4.

    log s_bt = sg[S̄_b] + logp_bt − sg[logp_bt] with S̄_b the length-normalized Σ_t m (logp − old_logp),
    s = exp(min(log s, 10)); clipped to [1 − ε_lo, 1 + ε_hi] with no dual clip. Must be aggregated with
    seq-mean-token-mean (see REQUIRED_AGG): with A constant per sequence this is the paper's sequence loss.
    """
    log_ratio = level_log_ratio(logp - old_logp, mask, "geo").clamp(max=GSPO_LOG_RATIO_MAX)  # (B, T)
    per_token, metrics = dual_clip_surrogate(log_ratio, advantages, mask, clip_low=clip_low,
                                             clip_high=clip_high, clip_dual=None)
    return apply_weights(per_token, weights), metrics


def cispo(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
          weights: Tensor | None = None, clip_low: float, clip_high: float) -> tuple[Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, arXiv 2506.13585 eq. 4): REINFORCE on log π_θ weighted by the clipped, stop-gradient
    token ratio, ℓ = −sg(clip(r, 1 − ε_lo, 1 + ε_hi))·A·log π_θ with r = π_θ/π_θold.

    Unlike PPO's clip no token loses its gradient: the weight is bounded, the log-prob term is not. The paper
    sets no lower bound (ε_lo large; 1.0 in the preset: r ≥ 0) and tunes ε_hi only. `rollout_logp` is unused (the mismatch
    enters through `weights`, as for ppo_clip).
    """
    log_ratio = masked_fill_zero(logp - old_logp, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio) * mask
    weight = ratio.detach().clamp(1.0 - clip_low, 1.0 + clip_high)  # (B, T) sg(r̂)
    per_token = masked_fill_zero(-weight * advantages * masked_fill_zero(logp, mask), mask)
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        high, low = (ratio > 1 + clip_high).to(m.dtype), (ratio < 1 - clip_low).to(m.dtype)
        metrics = {"clip_high": masked_mean(high, m).item(), "clip_low": masked_mean(low, m).item(),
                   "pg_clipfrac": masked_mean(high + low, m).item(), "out_of_band": masked_mean(high + low, m).item(),
                   "ppo_kl": masked_mean(-log_ratio, m).item(), "ratio_mean": masked_mean(ratio, m).item()}
    return apply_weights(per_token, weights), metrics


def is_reinforce(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                 weights: Tensor | None = None, clip_low: float,
                 clip_high: float) -> tuple[Tensor, dict[str, float]]:
    """Importance-sampled REINFORCE in bypass mode (verl's bypass + reinforce): ℓ = −sg(clip(π_θ/μ, 1 − ε_lo,
    1 + ε_hi))·A·log π_θ — CISPO's form with the sampler μ as the denominator, so one truncated IS weight
    corrects both the staleness and the mismatch. `old_logp` is unused."""
    return cispo(logp, rollout_logp, rollout_logp, advantages, mask, weights=weights, clip_low=clip_low,
                 clip_high=clip_high)


def gmpo(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
         weights: Tensor | None = None, clip_low: float, clip_high: float) -> tuple[Tensor, dict[str, float]]:
    """GMPO (arXiv 2507.20673): the geometric mean of the token ratios instead of their arithmetic mean.

    Per token, in log space, the PPO-style pessimistic clip: c_t = sgn(A)·min(sgn(A)·log r_t,
    sgn(A)·clamp(log r_t, −ε_lo, ε_hi)) with r = π_θ/π_θold; per sequence s_b = exp(mean_t c_t) and
    ℓ_b = −A_b·s_b, broadcast over the row (with grad) so that seq-mean-token-mean (REQUIRED_AGG) gives the
    sequence loss. The geometric mean is less moved by one outlier token than the arithmetic one.
    """
    log_ratio = masked_fill_zero(logp - old_logp, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    sign = torch.sign(advantages)
    clipped = log_ratio.clamp(-clip_low, clip_high)
    c = sign * torch.minimum(sign * log_ratio, sign * clipped)  # (B, T); with A = 0 the loss is 0 anyway
    n = mask.sum(-1, keepdim=True).clamp(min=1.0)  # (B, 1)
    seq = torch.exp((c * mask).sum(-1, keepdim=True) / n)  # (B, 1) s_b
    per_token = masked_fill_zero(-advantages * seq, mask)  # (B, T)
    with torch.no_grad():
        m = mask.to(log_ratio.dtype)
        out = ((log_ratio < -clip_low) | (log_ratio > clip_high)).to(m.dtype)
        rows = mask.sum(-1) > 0
        metrics = {"pg_clipfrac": masked_mean(out * (c != log_ratio).to(m.dtype), m).item(),
                   "out_of_band": masked_mean(out, m).item(), "ppo_kl": masked_mean(-log_ratio, m).item(),
                   "ratio_mean": torch.exp((log_ratio * m).sum(-1) / n[:, 0])[rows].mean().item()
                   if rows.any() else 1.0}
    return apply_weights(per_token, weights), metrics


def kl_penalty(logp: Tensor, ref_logp: Tensor, *, kind: str, old_logp: Tensor | None = None) -> Tensor:
    """Per-token KL-to-reference estimate (verl kl_penalty; http://joschu.net/blog/kl-approx.html), (B, T).

    d = logp − ref_logp. k1 / kl: d. k2 / mse: ½d². k3 / low_var_kl: u = ⟦ref_logp − logp⟧,
    e^u − u − 1, clamped to [−10, 10]. k3_is: k3 · π_θ/π_old with the ratio not detached, the importance-corrected
    estimator (TRL use_bias_correction_kl; DeepSeek-V3.2): k3 is unbiased under π_θ, the tokens come from π_old;
    needs `old_logp` (B, T). Aggregate it with `aggregate(·, m′)` and weight by β (reference §2.4).
    """
    if kind in ("k1", "kl"):
        return logp - ref_logp
    if kind in ("k2", "mse"):
        return 0.5 * (logp - ref_logp).square()
    if kind in ("k3", "low_var_kl", "k3_is"):
        u = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        k3 = (torch.expm1(u) - u).clamp(-10.0, 10.0)  # = e^u − u − 1, without float32's cancellation near 0
        if kind != "k3_is":
            return k3
        if old_logp is None:
            raise ValueError("kl_penalty: k3_is needs old_logp (the tokens' sampling-time log-probs)")
        return k3 * torch.exp((logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    raise ValueError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_KINDS)}")


def quatro(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
           weights: Tensor | None = None, upd_level: str, quatro_delta: float, quatro_log_ratio_clamp: float,
           quatro_grpo_scale: bool) -> tuple[Tensor, dict[str, float]]:
    """QUATRO trust-region loss [R] (arXiv 2602.04620; reference §3.7; duals: trainer/algorithms/quatro.py).

    `advantages` (B, T) must hold the target log-ratios t_b = log(G·w_b), w = softmax_group(A/λ_x), that
    `quatro_targets` computes once per rollout batch. Per token, with r = exp⟦logp − old_logp⟧ at `upd_level`
    (the preset's geo, stop-grad token form) and τ = 1/√(2δ) (1 without `quatro_grpo_scale`):

        ℓ = −τ·[r·t − (r log r − r + 1)],   ∂ℓ/∂log r = −τ·r·(t − log r)

    so each sample's log r is driven to t = A/λ_x − log Z_x, the exact per-query trust-region solution
    π* ∝ π_old·e^{A/λ_x}, and pulled back once it overshoots (the stabilizer; no clip). Departures, [R]:
    the KL term is the f-divergence r log r − r + 1 (same expectation under π_old as the paper's r log r,
    whose stationary point log r = A/λ − 1 would pull every ratio toward 1/e), and the objective of query x
    is divided by λ_x·√(2δ) (its maximizer is unchanged; the step no longer scales with λ_x). Rows whose
    target is exactly 0 — degenerate groups (A ≡ 0 ⇒ w uniform) and masked rows — get weight 0. The safety
    clamp |log r| ≤ `quatro_log_ratio_clamp` zeroes the gradient beyond it. Shapes (B, T).
    """
    if not quatro_delta > 0:
        raise ValueError(f"quatro loss needs algo.quatro_delta > 0 (the KL budget δ), got {quatro_delta}")
    tau = 1.0 / math.sqrt(2.0 * quatro_delta) if quatro_grpo_scale else 1.0
    bound = quatro_log_ratio_clamp if quatro_log_ratio_clamp > 0 else LOG_RATIO_CLAMP
    target = masked_fill_zero(advantages, mask)  # (B, T)
    log_ratio = level_log_ratio(logp - old_logp, mask, upd_level).clamp(-bound, bound)  # (B, T)
    ratio = torch.exp(log_ratio) * mask
    fdiv = (ratio * log_ratio - ratio + 1.0) * mask  # (B, T) ≥ 0, 0 at r = 1
    active = (target.abs().sum(-1, keepdim=True) > 0).to(ratio.dtype)  # (B, 1) degenerate rows: weight 0
    per_token = -tau * (ratio * target - fdiv) * active
    with torch.no_grad():
        m = mask.to(ratio.dtype) * active
        overshoot = ((target >= 0) & (log_ratio > target)) | ((target < 0) & (log_ratio < target))
        kl = masked_mean(fdiv, m).item()
        metrics = {
            "quatro_kl": kl,  # realized per-sample KL(π_θ‖π_old) estimate at the ratio's level
            "quatro_kl_over_delta": kl / quatro_delta,
            "quatro_overshoot_frac": masked_mean(overshoot.to(m.dtype), m).item(),
            "quatro_at_clamp_frac": masked_mean((log_ratio.abs() >= bound).to(m.dtype), m).item(),
            "quatro_active_frac": masked_mean(active.expand_as(mask), mask).item(),
            "ppo_kl": masked_mean(-log_ratio, m).item(),
            "ratio_mean": masked_mean(ratio, m).item(),
        }
    return apply_weights(masked_fill_zero(per_token, mask), weights), metrics


def _binary_kl(p_anchor: Tensor, p: Tensor) -> Tensor:
    """KL of the two-point distributions {p_a, 1 − p_a} ‖ {p, 1 − p} per token (DPPO's binary KL), (B, T)."""
    tiny = 1e-8  # as the DPPO code: a sampled token with p = 1 leaves 1 − p = 0
    return p_anchor * (torch.log(p_anchor + tiny) - torch.log(p + tiny)) + \
        (1 - p_anchor) * (torch.log(1 - p_anchor + tiny) - torch.log(1 - p + tiny))


def dppo_valid(logp: Tensor, rollout_logp: Tensor, advantages: Tensor, *, divergence: str, delta_low: float,
               delta_high: float) -> Tensor:
    """DPPO's trust region (arXiv 2602.04879): which tokens keep their gradient, (B, T) bool, no grad.

    A token leaves only when π_θ has moved past δ from the sampler μ in the direction its advantage pushes:
    tv: A > 0 and p_θ − p_μ > δ_hi, or A ≤ 0 and p_θ − p_μ < −δ_lo; kl: the binary KL(μ ‖ θ) above δ (δ_hi for
    A > 0, δ_lo otherwise) with p_θ moved the advantage's way. Anchored to μ as the paper's code and SkyRL
    (verl anchors to the recomputed π_old).
    """
    with torch.no_grad():
        p, p_mu = logp.detach().double().exp(), rollout_logp.double().exp()  # (B, T)
        if divergence == "tv":
            up_ok, down_ok = p - p_mu <= delta_high, p - p_mu >= -delta_low
        else:
            d = _binary_kl(p_mu, p)
            up_ok, down_ok = (d <= delta_high) | (p <= p_mu), (d <= delta_low) | (p >= p_mu)
        return torch.where(advantages > 0, up_ok, down_ok)


def _dppo(logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, weights: Tensor | None, *,
          divergence: str, clip_low: float, clip_high: float) -> tuple[Tensor, dict[str, float]]:
    """ℓ = −A·r·1[valid], r = π_θ/μ with grad (SkyRL dppo_policy_loss's form); δ_lo/δ_hi are clip_low/clip_high as
    verl reuses them. (B, T) in, per-token loss (B, T) out."""
    log_ratio = masked_fill_zero(logp - rollout_logp, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio) * mask
    valid = dppo_valid(logp, rollout_logp, advantages, divergence=divergence, delta_low=clip_low,
                       delta_high=clip_high).to(ratio.dtype)  # (B, T)
    per_token = masked_fill_zero(-advantages * ratio * valid, mask)
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        out = (1 - valid) * m
        metrics = {"pg_clipfrac": masked_mean(out, m).item(), "out_of_band": masked_mean(out, m).item(),
                   "dppo_masked_high": masked_mean(out * (advantages > 0), m).item(),
                   "dppo_masked_low": masked_mean(out * (advantages <= 0), m).item(),
                   "ppo_kl": masked_mean(-log_ratio, m).item(), "ratio_mean": masked_mean(ratio, m).item()}
    return apply_weights(per_token, weights), metrics


def dppo_tv(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
            weights: Tensor | None = None, clip_low: float, clip_high: float) -> tuple[Tensor, dict[str, float]]:
    """DPPO-Binary-TV: the probability difference to the sampler bounds the update (`dppo_valid`); old_logp unused."""
    return _dppo(logp, rollout_logp, advantages, mask, weights, divergence="tv", clip_low=clip_low,
                 clip_high=clip_high)


def dppo_kl(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
            weights: Tensor | None = None, clip_low: float, clip_high: float) -> tuple[Tensor, dict[str, float]]:
    """DPPO-Binary-KL: the binary KL to the sampler bounds the update (`dppo_valid`); old_logp unused."""
    return _dppo(logp, rollout_logp, advantages, mask, weights, divergence="kl", clip_low=clip_low,
                 clip_high=clip_high)


def sapo(logp: Tensor, old_logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *,
         weights: Tensor | None = None, sapo_tau_pos: float, sapo_tau_neg: float) -> tuple[Tensor, dict[str, float]]:
    """SAPO (arXiv 2511.20347): a soft gate instead of a hard clip, ℓ = −f_τ(r)·A with f_τ(r) = σ(τ(r − 1))·4/τ,
    r = π_θ/π_old per token (with grad), τ = τ_pos for A > 0 else τ_neg (verl / SkyRL / TRL: 1.0 / 1.05).

    f′_τ(1) = 1, so on-policy the gradient is GRPO's; away from r = 1 it decays as 4σ(1 − σ)·r instead of dropping
    to 0 at a clip edge. Aggregated seq-mean-token-mean (REQUIRED_AGG).
    """
    log_ratio = masked_fill_zero(logp - old_logp, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio) * mask
    tau = torch.where(advantages > 0, torch.full_like(ratio, sapo_tau_pos), torch.full_like(ratio, sapo_tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau  # (B, T)
    per_token = masked_fill_zero(-gate * advantages, mask)
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        metrics = {"sapo_gate_mean": masked_mean(gate, m).item(), "pg_clipfrac": 0.0,
                   "ppo_kl": masked_mean(-log_ratio, m).item(), "ratio_mean": masked_mean(ratio, m).item()}
    return apply_weights(per_token, weights), metrics


POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    "ppo_clip": ppo_clip,
    "bypass": bypass,
    "gspo": gspo,
    "quatro": quatro,
    "cispo": cispo,
    "gmpo": gmpo,
    "is_reinforce": is_reinforce,
    "dppo_tv": dppo_tv,
    "dppo_kl": dppo_kl,
    "sapo": sapo,
    "vespo": vespo,  # the 2026 off-policy losses: trainer/objective/offpolicy_losses.py
    "minpro": minpro,
    "ctpo": ctpo,
}

# Aggregation a loss is only correct with (the objective refuses any other `loss_agg`).
REQUIRED_AGG: dict[str, str] = {"gspo": "seq-mean-token-mean", "gmpo": "seq-mean-token-mean",
                                "sapo": "seq-mean-token-mean"}  # verl forces it for SAPO


MULTI_TRACE_SEQ_REFUSAL = (
    "QUATRO at algo.upd_level=seq cannot train an episode of several traces: its target is the log-ratio of the whole "
    "episode, which the product over one trace's tokens cannot carry; use algo.upd_level=geo (the preset's: each "
    "trace's mean log-ratio is driven to the episode's target, the episode's mean with it) or keep one trace an "
    "episode (env.think_history=keep, env.context=none)")
"""The one loss a multi-trace episode cannot define (trainer/algorithms/quatro.py; docs/architecture.md, "Episodes of
traces")."""


def get_policy_loss(name: str) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    """Look up a policy loss by name; unknown names raise with the valid choices."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; valid: {', '.join(sorted(POLICY_LOSSES))}") from None


def keyword_names(fn: Callable) -> list[str]:
    """`fn`'s keyword-only parameters: the AlgoConfig field names a loss or the correction takes its settings by."""
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
