"""Rollout–training mismatch diagnostics, once per rollout batch (reference/algorithms.md §4).

`mismatch_diagnostics(old_logp, rollout_logp, mask, rewards, step=...)` compares the trainer at θ_old
(unperturbed) with the engine on sampled tokens (m = 1; tool/env tokens never enter, pitfall 3):

- `rollout_corr/*` — verl's `compute_offpolicy_metrics` definitions: kl (k1), k3_kl, training/rollout
  (log-)ppl, log_ppl_diff (+abs/max/min), ppl_ratio, chi2_token, chi2_seq; `nonfinite_tokens`; and the same
  KL/ppl set split by reward sign (`positive_*`: R > 0, `negative_*`: R ≤ 0, as the ALP TIR code).
  Departure: per-row means skip empty rows (verl counts them as ppl 1).
- `training/rollout_probs_diff_{valid,max,mean,std}`, `training/rollout_actor_probs_pearson_corr` —
  verl's debug names: |Δp| on probabilities and their Pearson r (float64), arXiv 2506.13585.
- `ratio/*` — alprl additions: for r_mis at token level (token-weighted), seq product and geo (each
  per-sequence and token-weighted, `_tokw`): mean, std, min, max, quantiles p01…p99 and the envelope
  P98 − P2 / log P98 − log P2; ESS (verl form, clamped to [1/C, C], and Kish); P2/P98 of the token ratio
  per rollout-probability bin; |Δp| P75/P99. All of them describe the raw r_mis = π_train(θ_old)/μ, before
  any truncation or masking; the weights the loss applies are `rollout_corr/applied_w_*`, verl's statistics of
  the correction weights (before rejection and batch norm) `rollout_corr/rollout_is_*`, and the raw value at
  the correction's level `rollout_corr/raw_ratio_*` (all from `trainer/objective/corrections.py`).

Quantiles use at most `max_samples` (2^20) positions drawn uniformly without replacement by a generator
seeded from (step, rank, metric name) — `torch.quantile` refuses > 2^24 elements (verl PR #3810); linear
interpolation. Single process: no cross-rank gather. `perturbation_prob_shift` gives ALP's
perturbation-induced |Δp| (paper Fig. 8) on the first micro-batch of a rollout batch.

Legend: B trajectories, T response positions, N valid tokens, B′ non-empty rows.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from envs.splits import derive_seed
from trainer.objective.losses import LOG_RATIO_CLAMP

QUANTILES = (0.01, 0.02, 0.05, 0.25, 0.5, 0.75, 0.95, 0.98, 0.99)
PROB_BINS = ((0.0, 1e-3, "lt1e-3"), (1e-3, 1e-2, "1e-3_1e-2"), (1e-2, 0.1, "1e-2_0.1"),
             (0.1, 0.5, "0.1_0.5"), (0.5, 0.9, "0.5_0.9"), (0.9, math.inf, "ge0.9"))


def _qname(q: float) -> str:
    return f"p{round(q * 100):02d}"


def metric_generator(step: int, rank: int, name: str) -> torch.Generator:
    """Dedicated generator for one metric's sample (stable across processes, unlike hash())."""
    return torch.Generator().manual_seed(derive_seed("metric-sample", step, rank, name))


def sample_positions(total: int, k: int, generator: torch.Generator) -> Tensor | None:
    """K = min(total, k) positions uniformly without replacement; None means "use all"."""
    if total <= k:
        return None
    return torch.randperm(total, generator=generator)[:k]


def distribution_stats(values: Tensor, counts: Tensor | None = None, *, generator: torch.Generator,
                       max_samples: int = 2**20, quantiles: tuple[float, ...] = QUANTILES) -> dict[str, float]:
    """mean/std/min/max and sampled quantiles of `values` (M,), each repeated `counts` (M,) times.

    counts gives token weighting of per-sequence values without materializing Σ counts elements: sampled
    token positions are mapped back to their row with searchsorted. std is the (weighted) population std.
    """
    values = values.double()
    w = torch.ones_like(values) if counts is None else counts.double()
    total = w.sum()
    mean = (w * values).sum() / total
    out = {"mean": mean.item(), "std": ((w * (values - mean).square()).sum() / total).sqrt().item(),
           "min": values.min().item(), "max": values.max().item()}
    n = int(total.item())
    pos = sample_positions(n, max_samples, generator)
    if counts is None:
        sample = values if pos is None else values[pos]
    else:
        pos = torch.arange(n) if pos is None else pos
        sample = values[torch.searchsorted(torch.cumsum(counts.long(), 0), pos, right=True)]
    qs = torch.quantile(sample, torch.tensor(quantiles, dtype=torch.float64))
    out |= {_qname(q): v for q, v in zip(quantiles, qs.tolist(), strict=True)}
    return out


def _with_envelope(stats: dict[str, float]) -> dict[str, float]:
    stats["envelope"] = stats["p98"] - stats["p02"]
    stats["log_envelope"] = math.log(max(stats["p98"], 1e-300)) - math.log(max(stats["p02"], 1e-300))
    return stats


def _safe_exp(x: Tensor) -> Tensor:
    return torch.exp(x.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def kish_ess(w: Tensor) -> float:
    """Kish effective sample size fraction (Σw)² / (N·Σw²) ∈ (0, 1]."""
    w = w.double()
    return (w.sum().square() / (w.numel() * w.square().sum())).item() if w.numel() else 0.0


def log_ratio_stats(delta: Tensor, mask: Tensor, *, name: str, step: int, rank: int = 0,
                    max_samples: int = 2**20) -> dict[str, float]:
    """`ratio/{name}_{token,seq,seq_tokw,geo,geo_tokw}/*` for a per-token log-ratio Δ (B, T) on m.

    Reusable for any ratio (r_mis here; r_upd, r_byp or the ALP ratio from the update forward).
    """
    m = mask > 0
    n_b = m.sum(-1)  # (B,)
    rows = n_b > 0
    out: dict[str, float] = {}
    if not rows.any():
        return out
    d = torch.where(m, delta.double(), 0.0)  # (B, T)
    seq = d.sum(-1)[rows]  # (B′,) S_b
    geo = seq / n_b[rows]
    series = {
        "token": (_safe_exp(d[m]), None),
        "seq": (_safe_exp(seq), None), "seq_tokw": (_safe_exp(seq), n_b[rows]),
        "geo": (_safe_exp(geo), None), "geo_tokw": (_safe_exp(geo), n_b[rows]),
    }
    for level, (values, counts) in series.items():
        key = f"ratio/{name}_{level}"
        stats = distribution_stats(values, counts, generator=metric_generator(step, rank, key),
                                   max_samples=max_samples)
        out |= {f"{key}/{k}": v for k, v in _with_envelope(stats).items()}
    out[f"ratio/{name}_token/ess_kish"] = kish_ess(series["token"][0])
    out[f"ratio/{name}_seq/ess_kish"] = kish_ess(series["seq"][0])
    return out


def _offpolicy(old: Tensor, rollout: Tensor, m: Tensor, prefix: str) -> dict[str, float]:
    """verl compute_offpolicy_metrics on rows with valid tokens; old/rollout (B, T) float64, m bool."""
    rows = m.sum(-1) > 0
    if not rows.any():
        return {}
    old, rollout, m = old[rows], rollout[rows], m[rows]
    n_b = m.sum(-1)  # (B′,)
    delta = torch.where(m, old - rollout, 0.0)  # Δ_mis, unclamped
    mean_old = torch.where(m, old, 0.0).sum(-1) / n_b  # (B′,)
    mean_roll = torch.where(m, rollout, 0.0).sum(-1) / n_b
    diff = mean_roll - mean_old  # log_ppl_diff per row
    return {
        f"rollout_corr/{prefix}kl": (-delta[m]).mean().item(),
        f"rollout_corr/{prefix}k3_kl": (torch.exp(delta[m]) - delta[m] - 1).mean().item(),
        f"rollout_corr/{prefix}training_ppl": torch.exp(-mean_old).mean().item(),
        f"rollout_corr/{prefix}training_log_ppl": (-mean_old).mean().item(),
        f"rollout_corr/{prefix}rollout_ppl": torch.exp(-mean_roll).mean().item(),
        f"rollout_corr/{prefix}rollout_log_ppl": (-mean_roll).mean().item(),
        f"rollout_corr/{prefix}log_ppl_diff": diff.mean().item(),
        f"rollout_corr/{prefix}log_ppl_abs_diff": diff.abs().mean().item(),
        f"rollout_corr/{prefix}ppl_ratio": torch.exp(diff).mean().item(),
        **({"rollout_corr/log_ppl_diff_max": diff.max().item(), "rollout_corr/log_ppl_diff_min": diff.min().item(),
            "rollout_corr/chi2_token": (_safe_exp(delta[m]).square().mean() - 1).item(),
            "rollout_corr/chi2_seq": (torch.exp(2 * delta.sum(-1).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).mean()
                                      - 1).item()} if not prefix else {}),
    }


def _prob_diff(p_tr: Tensor, p_ro: Tensor, *, step: int, rank: int, max_samples: int) -> dict[str, float]:
    """|Δp| statistics and Pearson r of the token probabilities (float64), valid tokens only."""
    diff = (p_tr - p_ro).abs()
    stats = distribution_stats(diff, generator=metric_generator(step, rank, "abs_dp"), max_samples=max_samples,
                               quantiles=(0.75, 0.99))
    out = {"training/rollout_probs_diff_valid": 1.0, "training/rollout_probs_diff_max": stats["max"],
           "training/rollout_probs_diff_mean": stats["mean"],
           "training/rollout_probs_diff_std": diff.std().item() if diff.numel() > 1 else 0.0,
           "ratio/abs_dp_p75": stats["p75"], "ratio/abs_dp_p99": stats["p99"]}
    if diff.numel() > 1 and p_tr.std() > 0 and p_ro.std() > 0:  # undefined for constant inputs: omitted
        out["training/rollout_actor_probs_pearson_corr"] = torch.corrcoef(torch.stack([p_tr, p_ro]))[0, 1].item()
    return out


def _binned_envelope(ratio: Tensor, p_ro: Tensor, *, name: str, step: int, rank: int,
                     max_samples: int) -> dict[str, float]:
    """P2/P98 of the token ratio per rollout-probability bin, and each bin's token fraction."""
    out = {}
    for lo, hi, label in PROB_BINS:
        inside = (p_ro >= lo) & (p_ro < hi)
        if not inside.any():
            continue
        key = f"ratio/{name}_token/bin_{label}"
        stats = distribution_stats(ratio[inside], generator=metric_generator(step, rank, key),
                                   max_samples=max_samples, quantiles=(0.02, 0.98))
        out |= {f"{key}/p02": stats["p02"], f"{key}/p98": stats["p98"],
                f"{key}/frac": inside.double().mean().item()}
    return out


@torch.no_grad()
def mismatch_diagnostics(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, rewards: Tensor | None, *,
                         step: int, max_samples: int = 2**20, rank: int = 0,
                         is_threshold: float = 2.0) -> dict[str, float]:
    """All §4 rollout–training mismatch metrics of one rollout batch (see the module docstring).

    old_logp, rollout_logp, mask: (B, T); rewards: (B,) or None (no sign split). `is_threshold` is C of
    the verl-form ESS (weights clamped to [1/C, C]).
    """
    if not (old_logp.shape == rollout_logp.shape == mask.shape):
        raise ValueError(f"mismatch_diagnostics: shapes differ: old {tuple(old_logp.shape)}, rollout "
                         f"{tuple(rollout_logp.shape)}, mask {tuple(mask.shape)}")
    if rewards is not None and rewards.shape != old_logp.shape[:1]:
        raise ValueError(f"mismatch_diagnostics: rewards shape {tuple(rewards.shape)} != ({old_logp.shape[0]},)")
    valid = mask > 0
    finite = torch.isfinite(old_logp) & torch.isfinite(rollout_logp)
    m = valid & finite  # (B, T)
    out = {"rollout_corr/nonfinite_tokens": float((valid & ~finite).sum()),
           "rollout_corr/valid_tokens": float(m.sum())}
    if not m.any():
        return out
    old, roll = old_logp.double(), rollout_logp.double()
    out |= _offpolicy(old, roll, m, "")
    if rewards is not None:
        for prefix, rows in (("positive_", rewards > 0), ("negative_", rewards <= 0)):
            out |= _offpolicy(old, roll, m & rows[:, None], prefix)
    delta = torch.where(m, old - roll, 0.0)  # (B, T)
    # the zero-mismatch gate's number (slime gates CI on it): how far the trainer's log-prob of a sampled token
    # is from the sampler's, at worst and on average
    out["rollout_corr/logp_abs_diff_max"] = delta[m].abs().max().item()
    out["rollout_corr/logp_abs_diff_mean"] = delta[m].abs().mean().item()
    out |= log_ratio_stats(delta, m, name="mis", step=step, rank=rank, max_samples=max_samples)
    ratio = _safe_exp(delta[m])  # (N,) token r_mis
    clamped = ratio.clamp(1.0 / is_threshold, is_threshold)
    out["ratio/mis_token/ess"] = (1.0 / (clamped / clamped.mean()).square().mean()).item()
    p_tr, p_ro = torch.exp(old[m]), torch.exp(roll[m])
    out |= _prob_diff(p_tr, p_ro, step=step, rank=rank, max_samples=max_samples)
    out |= _binned_envelope(ratio, p_ro, name="mis", step=step, rank=rank, max_samples=max_samples)
    return out


@torch.no_grad()
def perturbation_prob_shift(logp: Tensor, old_logp: Tensor, mask: Tensor, *, step: int,
                            rank: int = 0, max_samples: int = 2**20) -> dict[str, float]:
    """ALP's perturbation-induced |Δp| = |exp(logp^δ) − exp(old_logp)| (paper Fig. 8): mean and P75.

    Only meaningful on the first micro-batch of a rollout batch, where θ = θ_old so the difference is the
    noise alone. logp, old_logp, mask: (b, T).
    """
    m = (mask > 0) & torch.isfinite(logp) & torch.isfinite(old_logp)
    if not m.any():
        return {}
    diff = (torch.exp(logp.detach().double()[m]) - torch.exp(old_logp.double()[m])).abs()
    stats = distribution_stats(diff, generator=metric_generator(step, rank, "perturb_dp"),
                               max_samples=max_samples, quantiles=(0.75,))
    return {"perturb/delta_p_mean": stats["mean"], "perturb/delta_p_p75": stats["p75"]}
