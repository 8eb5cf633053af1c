"""Rollout-mismatch correction weights (TIS / MIS), computed once per rollout batch (reference §3.2).

The correction value is `v = π_train(θ_old)/μ`, from `Δ_mis = old_logp − rollout_logp` (no grad) at
`corr_level`: token `exp⟦Δ_bt⟧`, seq `exp⟦Σ_t m Δ_bt⟧`, geo `exp⟦mean_t Δ_bt⟧` (broadcast), turn / turn_geo
the same product / mean over each turn of a multi-turn episode (a maximal run of sampled tokens). It yields
detached weights `w` and a rejection mask `m′ = m ⊙ keep`; the loss is `agg(w ⊙ ℓ, m′)`.

- tis: `w = min(v, C)`, `m′ = m` (TIS, https://fengyao.notion.site/off-policy-rl).
- mis, `paper` semantics (ALP multi-turn code, rollout_is.py mode "mask"; "When Speed Kills Stability"):
  `w = v·1[L ≤ v ≤ U]`, `m′ = m`: masked tokens add 0 but stay in token-mean's denominator; L = 0
  unless set (the released TIR scripts; their code's unset default 1/U is not used).
- mis, `verl` semantics (verl rollout_corr_helper.py = ALP single-turn code): `w = min(v, C)`,
  `keep = 1[L ≤ v ≤ C]`, `m′ = m·keep`, L = 1/C unless set: rejected tokens/sequences leave the denominator.
- rejection by divergence (optional, `rollout_rs`): verl's token / seq_sum / seq_mean / seq_max options on
  k1 / k2 / k3 of Δ_mis (`trainer/rejection.py`); rejected tokens leave m′ whatever the correction.
- veto (optional): a sequence with any token `v_bt < threshold` is rejected, following the semantics
  (paper: weight 0, verl: leaves m′). batch norm (optional): `w / mean(w)` over the tokens of m′ (token
  level) or the non-empty rows (seq/geo), when that mean > 1e-8 — verl averages over m before rejection;
  alprl averages what actually enters the loss so that the applied weights have mean 1.
- Band tests are done in log space on the unclamped value. `corr_k1_quirk` reproduces verl's `*_k1` modes
  (band on k1 = −log v, i.e. keeps v ∈ [1/U, 1/L]); reference §7 pitfall 4. Off by default.
- Tokens whose old or rollout log-prob is non-finite are removed from m′ for every correction (counted
  as `rollout_corr/nonfinite_tokens`), reference §7 pitfall 2.

Metrics (`rollout_corr/*`), two families with verl's statistic names:
- `rollout_is_*` (mean, std, min, max, eff_sample_size, ratio_fraction_high/low at C and 1/C, and the
  per-sequence `rollout_is_seq_*`) describe the weights **applied in the loss**: the final w (after
  truncation, masking, veto and batch norm) over the tokens of m′, i.e. those that enter the loss
  (paper-MIS masked tokens stay in m′ with w = 0). So rollout_is_max ≤ C under TIS or verl-MIS without
  batch norm. Departure: verl 0.8 (`rollout_corr_helper.compute_is_metrics`) computes these names before
  truncation, rejection and batch norm; here that value is under `raw_ratio_*`.
- `raw_ratio_*` (same statistics, `raw_ratio_seq_*` per sequence) describe the raw value v before
  truncation or masking, over m: how heavy the mismatch tail is and how often the bounds act. Seq/geo
  max/min and high/low fractions are taken per row in log space on the unclamped value; the ESS is verl's
  pre-truncation form (v clamped to [1/C, C]). `trainer/mismatch_metrics.py` `ratio/mis_*` are raw too.
- `rollout_rs_*` / `rollout_is_masked_fraction` (rejection/mask fractions), veto and batch-norm keys as
  verl, plus `masked_frac` (pitfall 7) and `weight_mean` (= mean of the applied w over m′, also without
  a correction).

Legend: B trajectories, T response positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.losses import LOG_RATIO_CLAMP, RATIO_LEVELS, masked_fill_zero, masked_mean
from trainer.rejection import divergence_rejection, parse_rs

CORRECTIONS = ("none", "tis", "mis")
CORR_LEVELS = (*RATIO_LEVELS, "turn", "turn_geo")  # the per-turn levels exist for the correction value only
MIS_SEMANTICS = ("paper", "verl")


@dataclass
class Correction:
    """Output of `compute_correction`.

    weights: (B, T) detached w ≥ 0; 0 wherever keep = 0 (and where paper-MIS masks).
    keep:    (B, T) m′ ∈ {0, 1} (float): the mask the loss and its denominators use.
    metrics: `rollout_corr/*` scalars.
    """

    weights: Tensor
    keep: Tensor
    metrics: dict[str, float]


def correction_log_value(delta: Tensor, mask: Tensor, level: str) -> tuple[Tensor, Tensor | None]:
    """log v at `level`, broadcast to (B, T) and unclamped; plus the per-row value (B,) for seq/geo.

    delta: (B, T) Δ_mis, already 0 where m = 0.
    """
    if level == "token":
        return delta, None
    if level in ("turn", "turn_geo"):
        return turn_log_value(delta, mask, geo=level == "turn_geo"), None
    row = delta.sum(-1)  # (B,)
    if level == "geo":
        row = row / mask.sum(-1).clamp(min=1.0)
    elif level != "seq":
        raise ValueError(f"unknown corr_level {level!r}; valid: {', '.join(CORR_LEVELS)}")
    return row[:, None].expand_as(delta), row


def turn_segments(mask: Tensor) -> Tensor:
    """(B, T) index of each sampled token's turn within its row (−1 where m = 0): a turn is a maximal run of
    sampled tokens, which the rollout separates by the observation tokens it appends (m = 0)."""
    m = mask > 0
    starts = m & ~torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], dim=1)  # (B, T) first token of a turn
    return torch.where(m, starts.long().cumsum(-1) - 1, -1)


def turn_log_value(delta: Tensor, mask: Tensor, *, geo: bool) -> Tensor:
    """Per-turn (segment) log v broadcast over the turn's tokens, (B, T): Σ of Δ over the turn, or its mean with
    `geo` (ROLL's segment IS: a long episode's product no longer collapses the weight of every turn)."""
    seg = turn_segments(mask)
    index = seg.clamp(min=0)  # (B, T); a row has at most T turns
    m = (seg >= 0).to(delta.dtype)
    sums = torch.zeros_like(delta).scatter_add_(1, index, delta * m)  # (B, T) per-turn Σ Δ at the turn's slot
    value = sums.gather(1, index)
    if geo:
        counts = torch.zeros_like(delta).scatter_add_(1, index, m)
        value = value / counts.gather(1, index).clamp(min=1.0)
    return value * m


def _log_or_inf(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf  # L = 0 means no lower bound


def in_band(log_v: Tensor, lower: float, upper: float, *, k1_quirk: bool = False) -> Tensor:
    """1[L ≤ v ≤ U] in log space (bool, same shape); with `k1_quirk`, verl's 1[log L ≤ −log v ≤ log U]."""
    if k1_quirk:
        k1 = -log_v
        return (k1 >= _log_or_inf(lower)) & (k1 <= _log_or_inf(upper))
    return (log_v >= _log_or_inf(lower)) & (log_v <= _log_or_inf(upper))


def _check(correction: str, level: str, semantics: str, upper: float, lower: float) -> None:
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; valid: {', '.join(CORRECTIONS)}")
    if level not in CORR_LEVELS:
        raise ValueError(f"unknown corr_level {level!r}; valid: {', '.join(CORR_LEVELS)}")
    if semantics not in MIS_SEMANTICS:
        raise ValueError(f"unknown mis_semantics {semantics!r}; valid: {', '.join(MIS_SEMANTICS)}")
    if not upper > 0 or not 0 <= lower <= upper:
        raise ValueError(f"correction bounds need 0 ≤ corr_lower ≤ corr_upper and corr_upper > 0, "
                         f"got lower={lower}, upper={upper}")


BatchSum = Callable[[Tensor], Tensor]  # Σ over data-parallel ranks


@torch.no_grad()
def compute_correction(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, *, correction: str = "none",
                       corr_level: str = "token", corr_upper: float = 5.0, corr_lower: float | None = None,
                       mis_semantics: str = "paper", corr_k1_quirk: bool = False, corr_veto: bool = False,
                       corr_veto_threshold: float = 1e-4, corr_batch_norm: bool = False, rollout_rs: str = "",
                       rollout_rs_threshold: str = "", batch_sum: BatchSum | None = None) -> Correction:
    """Weights w and rejection mask m′ for one rollout batch; inputs (B, T), see the module docstring.

    corr_lower None means the semantics' default: 0 for `paper` (the ALP TIR scripts), 1/C for `verl`.
    batch_sum: sums a tensor over the data-parallel ranks (in place), so `corr_batch_norm` divides by the mean over
    the global batch; None: this batch is the whole batch.
    """
    if not (old_logp.shape == rollout_logp.shape == mask.shape):
        raise ValueError(f"compute_correction: shapes differ: old {tuple(old_logp.shape)}, rollout "
                         f"{tuple(rollout_logp.shape)}, mask {tuple(mask.shape)}")
    upper = float(corr_upper)
    if corr_lower is None:
        lower = 0.0 if mis_semantics == "paper" else 1.0 / upper
    else:
        lower = float(corr_lower)
    _check(correction, corr_level, mis_semantics, upper, lower)
    valid = mask > 0
    finite = torch.isfinite(old_logp) & torch.isfinite(rollout_logp)
    m = (valid & finite).to(torch.float32)  # (B, T) m without non-finite tokens
    metrics = {"rollout_corr/nonfinite_tokens": float((valid & ~finite).sum())}
    delta = masked_fill_zero(old_logp.float() - rollout_logp.float(), m)  # (B, T) Δ_mis
    log_v, row = correction_log_value(delta, m, corr_level)
    v = torch.exp(log_v.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) * m  # (B, T)
    keep = m.clone()
    if correction == "none":
        weights = m.clone()
    elif correction == "tis":
        weights = v.clamp(max=upper)
    else:
        band = in_band(log_v, lower, upper, k1_quirk=corr_k1_quirk).float() * m  # (B, T)
        metrics |= _mask_metrics(band, m, mis_semantics)
        if mis_semantics == "paper":
            weights = v * band
        else:
            weights, keep = v.clamp(max=upper) * band, keep * band
    if correction != "none" and m.any():
        metrics |= raw_ratio_metrics(v, row, m, upper)
    if corr_veto:
        weights, keep, veto_metrics = _veto(delta, m, weights, keep, corr_veto_threshold, mis_semantics)
        metrics |= veto_metrics
    if rollout_rs:  # verl's rejection by divergence (trainer/rejection.py): rejected tokens leave m′
        rs_keep, rs_metrics = divergence_rejection(delta, m, parse_rs(rollout_rs, rollout_rs_threshold))
        keep = keep * rs_keep
        metrics |= rs_metrics
    if corr_batch_norm:
        weights, factor = _batch_normalize(weights, keep, corr_level, batch_sum)
        metrics["rollout_corr/rollout_is_batch_norm_factor"] = factor
    weights = weights * keep
    metrics["rollout_corr/weight_mean"] = masked_mean(weights, keep).item()
    if correction != "none" and keep.any():
        metrics |= applied_weight_metrics(weights, keep, upper)
    return Correction(weights=weights.detach(), keep=keep, metrics=metrics)


def _mask_metrics(band: Tensor, m: Tensor, semantics: str) -> dict[str, float]:
    """Masked fraction of tokens and of non-empty sequences with any masked token."""
    masked = (1.0 - band) * m  # (B, T)
    rows = m.sum(-1) > 0  # (B,)
    token_frac = masked_mean(masked, m).item()
    seq_frac = (masked.sum(-1)[rows] > 0).float().mean().item() if rows.any() else 0.0
    name = "rollout_is" if semantics == "paper" else "rollout_rs"  # ALP-code vs verl key names
    return {"rollout_corr/masked_frac": token_frac, f"rollout_corr/{name}_masked_fraction": token_frac,
            f"rollout_corr/{name}_seq_masked_fraction": seq_frac}


def _veto(delta: Tensor, m: Tensor, weights: Tensor, keep: Tensor, threshold: float,
          semantics: str) -> tuple[Tensor, Tensor, dict[str, float]]:
    if not threshold > 0:
        raise ValueError(f"corr_veto_threshold must be > 0, got {threshold}")
    catastrophic = (delta < math.log(threshold)) & (m > 0)  # (B, T)
    bad_row = catastrophic.any(-1, keepdim=True)  # (B, 1)
    ok = (~bad_row).float()
    if semantics == "paper":
        weights = weights * ok
    else:
        keep = keep * ok
    rows = m.sum(-1) > 0
    return weights, keep, {
        "rollout_corr/rollout_is_veto_fraction": bad_row[rows].float().mean().item() if rows.any() else 0.0,
        "rollout_corr/rollout_is_catastrophic_token_fraction": masked_mean(catastrophic.float(), m).item(),
    }


def _batch_normalize(weights: Tensor, keep: Tensor, level: str,
                     batch_sum: BatchSum | None = None) -> tuple[Tensor, float]:
    """w / mean(w): over kept tokens, or for sequence-level weights over the kept rows' mean weights."""
    if level not in ("seq", "geo"):  # token and per-turn values: over tokens
        parts = torch.stack([(weights * keep).sum(), keep.sum()]).double()
    else:
        n = keep.sum(-1)  # (B,)
        rows = n > 0
        row_means = (weights * keep).sum(-1)[rows] / n[rows]
        parts = torch.stack([row_means.sum(), rows.sum()]).double()
    if batch_sum is not None:
        parts = batch_sum(parts)
    mean = (parts[0] / parts[1]).to(weights.dtype) if parts[1] > 0 else weights.new_zeros(())
    if mean > 1e-8:
        return weights / mean, mean.item()
    return weights, 1.0


def _seq_stats(seq: Tensor, upper: float, prefix: str) -> dict[str, float]:
    """Statistics of per-sequence mean weights (B′,), thresholds C and 1/C."""
    return {f"{prefix}_seq_mean": seq.mean().item(),
            f"{prefix}_seq_std": seq.std().item() if seq.numel() > 1 else 0.0,
            f"{prefix}_seq_max": seq.max().item(), f"{prefix}_seq_min": seq.min().item(),
            f"{prefix}_seq_max_deviation": (seq - 1.0).abs().max().item(),
            f"{prefix}_seq_fraction_high": (seq > upper).float().mean().item(),
            f"{prefix}_seq_fraction_low": (seq < 1.0 / upper).float().mean().item()}


def applied_weight_metrics(weights: Tensor, keep: Tensor, upper: float) -> dict[str, float]:
    """`rollout_corr/rollout_is_*`: the weights w (B, T) the loss applies, over the tokens of m′ = keep (B, T).

    Token-weighted mean/std (population)/min/max, ESS 1/mean((w/mean w)²) (verl's form, 0 when every
    weight is 0), fractions above C and below 1/C; per-sequence means of w over each non-empty row of m′.
    """
    valid = keep > 0
    w = weights[valid].double()  # (N′,)
    mean = w.mean()
    out = {"rollout_is_mean": mean.item(), "rollout_is_max": w.max().item(), "rollout_is_min": w.min().item(),
           "rollout_is_std": (w.square().mean() - mean.square()).clamp(min=0).sqrt().item(),
           "rollout_is_eff_sample_size": (1.0 / (w / mean).square().mean()).item() if mean > 0 else 0.0,
           "rollout_is_ratio_fraction_high": (w > upper).double().mean().item(),
           "rollout_is_ratio_fraction_low": (w < 1.0 / upper).double().mean().item()}
    rows = valid.any(-1)  # (B,)
    seq = (weights.double() * keep).sum(-1)[rows] / keep.sum(-1)[rows]  # (B′,) mean applied weight per row
    out |= _seq_stats(seq, upper, "rollout_is")
    return {f"rollout_corr/{key}": value for key, value in out.items()}


def raw_ratio_metrics(v: Tensor, row_log_v: Tensor | None, m: Tensor, upper: float) -> dict[str, float]:
    """`rollout_corr/raw_ratio_*`: the value v (B, T) before truncation or masking, over m (B, T).

    row_log_v: (B,) unclamped per-row log v at seq/geo level (None at token level): max/min and the
    high/low fractions then use it in log space, over non-empty rows. The ESS is verl's pre-truncation
    form (v clamped to [1/C, C] before squaring); std is the population std of v.
    """
    lower = 1.0 / upper
    valid = m > 0
    rows = m.sum(-1) > 0  # (B,)
    mean = masked_mean(v, m)
    out = {"raw_ratio_mean": mean.item(),
           "raw_ratio_std": (masked_mean(v.square(), m) - mean.square()).clamp(min=0).sqrt().item()}
    if row_log_v is None:
        out["raw_ratio_max"] = v[valid].max().item()
        out["raw_ratio_min"] = v[valid].min().item()
        out["raw_ratio_fraction_high"] = masked_mean((v > upper).float(), m).item()
        out["raw_ratio_fraction_low"] = masked_mean((v < lower).float(), m).item()
    else:
        lv = row_log_v[rows]
        out["raw_ratio_max"] = math.exp(min(lv.max().item(), LOG_RATIO_CLAMP))
        out["raw_ratio_min"] = math.exp(max(lv.min().item(), -LOG_RATIO_CLAMP))
        out["raw_ratio_fraction_high"] = (lv > math.log(upper)).float().mean().item()
        out["raw_ratio_fraction_low"] = (lv < math.log(lower)).float().mean().item()
    clamped = v.clamp(lower, upper)  # verl clamps to [1/C, C] before squaring
    out["raw_ratio_eff_sample_size"] = 1.0 / masked_mean((clamped / (masked_mean(clamped, m) + 1e-8)).square(),
                                                         m).item()
    seq = (v * m).sum(-1)[rows] / m.sum(-1)[rows]  # (B′,) per-sequence mean value
    out |= _seq_stats(seq, upper, "raw_ratio")
    return {f"rollout_corr/{key}": value for key, value in out.items()}
