"""Rollout-mismatch correction weights (TIS / MIS), computed once per rollout batch (reference §3.2).

`prepare_corrections(algo, batch)` is the batch stage: after the old log-probs, w and m′ for the whole rollout
batch (and M2PO's second-moment mask), which `prepare_batch` (trainer/loop.py) stores as `corr_weights` /
`corr_keep`. Nothing computes them again per micro-batch: batch normalization needs the whole rollout batch and
verl-semantics rejection must leave m′ before the update's denominators are counted.

The correction value is `v = π_train(θ_old)/μ`, from `Δ_mis = old_logp − rollout_logp` (no grad) at
`corr_level`: token `exp⟦Δ_bt⟧`, seq `exp⟦Σ_t m Δ_bt⟧`, geo `exp⟦mean_t Δ_bt⟧` (broadcast), turn / turn_geo
the same product / mean over each turn of a multi-turn episode (a maximal run of sampled tokens). A sequence is an
episode: for an episode of several traces (agents/trajectory.py) seq / geo run over every trace's tokens, the value
the same on all its rows, and a veto rejects the whole episode (the sampler's and the trainer's probabilities of the
episode's actions, as if it had been one stream); a turn never spans two traces. It yields
detached weights `w` and a rejection mask `m′ = m ⊙ keep`; the loss is `agg(w ⊙ ℓ, m′)`.

- tis: `w = min(v, C)`, `m′ = m` (TIS, https://fengyao.notion.site/off-policy-rl).
- mis, `paper` semantics (ALP multi-turn code, rollout_is.py mode "mask"; "When Speed Kills Stability"):
  `w = v·1[L ≤ v ≤ U]`, `m′ = m`: masked tokens add 0 but stay in token-mean's denominator; L = 0
  unless set (the released TIR scripts; their code's unset default 1/U is not used).
- mis, `verl` semantics (verl rollout_corr_helper.py = ALP single-turn code): `w = min(v, C)`,
  `keep = 1[L ≤ v ≤ C]`, `m′ = m·keep`, L = 1/C unless set: rejected tokens/sequences leave the denominator.
- rejection by divergence (optional, `rollout_rs`): verl's token / seq_sum / seq_mean / seq_max options on
  k1 / k2 / k3 of Δ_mis (`trainer/objective/rejection.py`); rejected tokens leave m′ whatever the correction.
- veto (optional): a sequence with any token `v_bt < threshold` is rejected, following the semantics
  (paper: weight 0, verl: leaves m′). batch norm (optional): `w / mean(w)` over the tokens of m′ (token
  level) or the non-empty rows (seq/geo), when that mean > 1e-8 — verl averages over m before rejection;
  alprl averages what actually enters the loss so that the applied weights have mean 1.
- Band tests are done in log space on the unclamped value. `corr_k1_quirk` reproduces verl's `*_k1` modes
  (band on k1 = −log v, i.e. keeps v ∈ [1/U, 1/L]); reference §7 pitfall 4. Off by default.
- Tokens whose old or rollout log-prob is non-finite are removed from m′ for every correction (counted
  as `rollout_corr/nonfinite_tokens`), reference §7 pitfall 2.

Metrics (`rollout_corr/*`), three families of weight statistics:
- `rollout_is_*` (mean, std, min, max, eff_sample_size, ratio_fraction_high/low, `rollout_is_seq_*`) mean
  what verl 0.9 logs under those names (`verl/trainer/ppo/rollout_corr_helper.py` `compute_is_metrics`):
  w is the correction weight right after the branch above (tis min(v, C); verl-MIS min(v, C)·band;
  paper-MIS v·band), BEFORE veto, divergence rejection and batch norm, over all tokens of m. U = C;
  L = the band's lower bound under mis, else 1/C. Token level: max/min of the truncated w, fractions of
  the raw v above U / below L. seq/geo: max/min/fractions from each non-empty row's unclamped log value
  (Σ Δ, mean Δ); turn/turn_geo: the same from each turn's log value (one IS unit per turn). std/ESS use
  w clamped to [0, U]; seq fractions use each row's mean raw v. So under TIS with C = 2 a raw 13.4 gives
  rollout_is_max 2 at token level, and is counted by rollout_is_ratio_fraction_high. Departures, all
  at edges: rows with no sampled token are left out of per-row values (verl counts them), the seq-level
  min is capped at e^20 like the max, and the ESS is 0 (verl: a division by zero) when every w is 0.
- `applied_w_*` (same statistic names, `applied_w_seq_*` per sequence) describe the weights **applied in
  the loss**: the final w (after truncation, masking, veto, rejection and batch norm) over the tokens of
  m′ (paper-MIS masked tokens stay in m′ with w = 0), fractions at C and 1/C.
- `raw_ratio_*` (same statistics, `raw_ratio_seq_*` per sequence) describe the raw value v before
  truncation or masking, over m: how heavy the mismatch tail is and how often the bounds act. Seq/geo
  max/min and high/low fractions are taken per row in log space on the unclamped value; the ESS is verl's
  pre-truncation form (v clamped to [1/C, C]). `trainer/diagnostics/mismatch_metrics.py` `ratio/mis_*` are raw too.
- `rollout_rs_*` / `rollout_is_masked_fraction` (rejection/mask fractions), veto and batch-norm keys as
  verl, plus `masked_frac` (pitfall 7) and `weight_mean` (= applied_w_mean, also without a correction).

Legend: B trajectories, T response positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.config.algo_config import AlgoConfig
from trainer.objective.losses import (
    LOG_RATIO_CLAMP,
    RATIO_LEVELS,
    keyword_names,
    masked_fill_zero,
    masked_mean,
)
from trainer.objective.offpolicy_masks import m2po_keep
from trainer.objective.rejection import divergence_rejection, parse_rs
from trainer.objective.types import Batch, EpisodeRows

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


def correction_log_value(delta: Tensor, mask: Tensor, level: str,
                         episodes: EpisodeRows | None = None) -> tuple[Tensor, Tensor | None]:
    """log v at `level`, broadcast to (B, T) and unclamped; plus the per-row value (B,) for seq/geo, which is its
    episode's (over all the episode's rows) when `episodes` says which rows make one.

    delta: (B, T) Δ_mis, already 0 where m = 0.
    """
    if level == "token":
        return delta, None
    if level in ("turn", "turn_geo"):
        return turn_log_value(delta, mask, geo=level == "turn_geo"), None
    episodes = episodes or EpisodeRows.of(None, delta.shape[0])
    row = episodes.total(delta.sum(-1))  # (B,)
    if level == "geo":
        row = row / episodes.total(mask.sum(-1)).clamp(min=1.0)
    elif level != "seq":
        raise ValueError(f"unknown corr_level {level!r}; valid: {', '.join(CORR_LEVELS)}")
    return row[:, None].expand_as(delta), row


def turn_starts(mask: Tensor) -> Tensor:
    """(B, T) bool, true on the first token of each turn: a turn is a maximal run of sampled tokens, which
    the rollout separates by the observation tokens it appends (m = 0)."""
    m = mask > 0
    return m & ~torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], dim=1)


def turn_segments(mask: Tensor) -> Tensor:
    """(B, T) index of each sampled token's turn within its row (−1 where m = 0)."""
    return torch.where(mask > 0, turn_starts(mask).long().cumsum(-1) - 1, -1)


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


def is_unit_log_values(log_v: Tensor, mask: Tensor, level: str,
                       episodes: EpisodeRows | None = None) -> Tensor | None:
    """(N,) unclamped log v of each importance-sampling unit: one per non-empty episode (a row, unless `episodes`
    joins rows) at seq/geo, one per turn at turn/turn_geo; None at token level, where every token is its own unit.

    log_v: (B, T) from `correction_log_value`, constant over each unit's tokens, so the unit's first token
    carries its value.
    """
    if level == "token":
        return None
    valid = mask > 0
    if level in ("turn", "turn_geo"):
        first = turn_starts(mask)
    else:
        first = valid & (valid.long().cumsum(-1) == 1)  # (B, T) each non-empty row's first sampled token
        if episodes is not None and not episodes.one_row_each:  # only an episode's first non-empty row
            nonempty = valid.any(-1).long()  # (B,)
            before = torch.cumsum(nonempty, 0) - nonempty  # (B,) non-empty rows before each row
            within = before - episodes.per_row(before[episodes.first_rows()])  # (B,) ... within its episode
            first = first & (within == 0)[:, None]
    return log_v[first]


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
def compute_correction(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, *, correction: str, corr_level: str,
                       corr_upper: float, corr_lower: float | None, mis_semantics: str, corr_k1_quirk: bool,
                       corr_veto: bool, corr_veto_threshold: float, corr_batch_norm: bool, rollout_rs: str,
                       rollout_rs_threshold: str, batch_sum: BatchSum | None = None,
                       episodes: EpisodeRows | None = None) -> Correction:
    """Weights w and rejection mask m′ for one rollout batch; inputs (B, T), see the module docstring.

    The settings are `AlgoConfig` fields by name, with no defaults here (`correction_kwargs`).
    corr_lower None means the semantics' own bound: 0 for `paper` (the ALP TIR scripts), 1/C for `verl`.
    batch_sum: sums a tensor over the data-parallel ranks (in place), so `corr_batch_norm` divides by the mean over
    the global batch; None: this batch is the whole batch.
    episodes: which rows make one episode (None: each row its own); seq / geo values and the veto are the episode's.
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
    log_v, row = correction_log_value(delta, m, corr_level, episodes)
    units = is_unit_log_values(log_v, m, corr_level, episodes)  # (N,) one value per IS unit; None per token
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
        metrics |= raw_ratio_metrics(v, units if row is not None else None, m, upper)
        # verl's rollout_is_* read w here: truncated / masked, before veto, rejection and batch norm
        is_lower = lower if correction == "mis" else 1.0 / upper
        metrics |= verl_is_metrics(weights, v, units, m, upper, is_lower)
    if corr_veto:
        weights, keep, veto_metrics = _veto(delta, m, weights, keep, corr_veto_threshold, mis_semantics, episodes)
        metrics |= veto_metrics
    if rollout_rs:  # verl's rejection by divergence (trainer/objective/rejection.py): rejected tokens leave m′
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


def correction_kwargs(algo: AlgoConfig) -> dict:
    """Flat correction settings (`compute_correction` keywords are AlgoConfig field names, but for the rank sum and
    the episodes, which the batch gives)."""
    return {n: getattr(algo, n) for n in keyword_names(compute_correction) if n not in ("batch_sum", "episodes")}


def prepare_corrections(algo: AlgoConfig, batch: Batch,
                        batch_sum: BatchSum | None = None) -> tuple[Tensor, Tensor, dict[str, float]]:
    """w and m′ once for the rollout batch (needs `batch.old_logp`): (weights (B, T), keep (B, T), `rollout_corr/*`),
    which `prepare_batch` (trainer/loop.py) stores as `batch.corr_weights` / `batch.corr_keep`. `batch_sum` sums
    over data-parallel ranks (batch-normalized weights use the global mean). With `algo.m2_threshold`, M2PO's
    second-moment mask narrows m′ (trainer/objective/offpolicy_masks.py)."""
    if batch.old_logp is None:
        raise ValueError("prepare_corrections: batch.old_logp is None; run the old-log-prob stage first")
    corr = compute_correction(batch.old_logp, batch.rollout_logp, batch.loss_mask, **correction_kwargs(algo),
                              batch_sum=batch_sum, episodes=EpisodeRows.of(batch.episode_index, len(batch)))
    if algo.m2_threshold is None:
        return corr.weights, corr.keep, corr.metrics
    m2_keep, m2_metrics = m2po_keep(batch.old_logp, batch.rollout_logp, corr.keep, threshold=algo.m2_threshold)
    return corr.weights * m2_keep, m2_keep, corr.metrics | {f"rollout_corr/{k}": v for k, v in m2_metrics.items()}


def _mask_metrics(band: Tensor, m: Tensor, semantics: str) -> dict[str, float]:
    """Masked fraction of tokens and of non-empty sequences with any masked token."""
    masked = (1.0 - band) * m  # (B, T)
    rows = m.sum(-1) > 0  # (B,)
    token_frac = masked_mean(masked, m).item()
    seq_frac = (masked.sum(-1)[rows] > 0).float().mean().item() if rows.any() else 0.0
    name = "rollout_is" if semantics == "paper" else "rollout_rs"  # ALP-code vs verl key names
    return {"rollout_corr/masked_frac": token_frac, f"rollout_corr/{name}_masked_fraction": token_frac,
            f"rollout_corr/{name}_seq_masked_fraction": seq_frac}


def _veto(delta: Tensor, m: Tensor, weights: Tensor, keep: Tensor, threshold: float, semantics: str,
          episodes: EpisodeRows | None = None) -> tuple[Tensor, Tensor, dict[str, float]]:
    """A sequence (an episode: every row of it) with a token whose v is below `threshold` is rejected."""
    if not threshold > 0:
        raise ValueError(f"corr_veto_threshold must be > 0, got {threshold}")
    catastrophic = (delta < math.log(threshold)) & (m > 0)  # (B, T)
    bad = catastrophic.any(-1).float()  # (B,)
    bad_row = ((episodes.total(bad) if episodes is not None else bad) > 0)[:, None]  # (B, 1)
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


def _seq_stats(seq: Tensor, prefix: str) -> dict[str, float]:
    """Spread of per-sequence mean weights (B′,): mean, unbiased std (0 for one sequence), max, min and the
    largest deviation from 1."""
    return {f"{prefix}_seq_mean": seq.mean().item(),
            f"{prefix}_seq_std": seq.std().item() if seq.numel() > 1 else 0.0,
            f"{prefix}_seq_max": seq.max().item(), f"{prefix}_seq_min": seq.min().item(),
            f"{prefix}_seq_max_deviation": (seq - 1.0).abs().max().item()}


def _seq_fractions(seq: Tensor, upper: float, lower: float, prefix: str) -> dict[str, float]:
    """Fractions of per-sequence means (B′,) above `upper` and below `lower`."""
    return {f"{prefix}_seq_fraction_high": (seq > upper).float().mean().item(),
            f"{prefix}_seq_fraction_low": (seq < lower).float().mean().item()}


def _row_means(x: Tensor, m: Tensor) -> Tensor:
    """(B′,) mean of x (B, T) over each non-empty row of m (B, T)."""
    rows = m.sum(-1) > 0
    return (x.double() * m).sum(-1)[rows] / m.sum(-1)[rows]


def _truncated_spread(w: Tensor, m: Tensor, upper: float) -> dict[str, float]:
    """verl's std and ESS of w (B, T) clamped to [0, U], over m (B, T).

    std is 0 with a single token (verl's rule). ESS = 1 / mean((w_c / (mean w_c + 1e-8))²); 0 when every
    weight is 0 (verl would divide by zero there: paper-MIS can mask the whole batch).
    """
    w_c = w.clamp(0.0, upper)
    mean = masked_mean(w_c, m)
    variance = masked_mean(w_c.square(), m) - mean.square()
    second_moment = masked_mean((w_c / (mean + 1e-8)).square(), m).item()
    return {"rollout_is_std": variance.clamp(min=0).sqrt().item() if m.sum() > 1 else 0.0,
            "rollout_is_eff_sample_size": 1.0 / second_moment if second_moment > 0 else 0.0}


def verl_is_metrics(w: Tensor, raw: Tensor, unit_log_raw: Tensor | None, m: Tensor, upper: float,
                    lower: float) -> dict[str, float]:
    """`rollout_corr/rollout_is_*` as verl 0.9 defines them (module docstring), over all tokens of m (B, T).

    w: (B, T) the correction weight after truncation / band masking, before veto, rejection and batch norm.
    raw: (B, T) v = exp(clamp(log v, ±20))·m, before truncation or masking.
    unit_log_raw: (N,) each IS unit's unclamped log v (`is_unit_log_values`); None at token level.
    upper, lower: U and L of the high / low fractions (L = 0: nothing counts as low).
    """
    out = {"rollout_is_mean": masked_mean(w, m).item()}
    if unit_log_raw is None:  # token level: extremes of the truncated w, fractions of the raw v
        valid = m > 0
        out |= {"rollout_is_max": w[valid].max().item(), "rollout_is_min": w[valid].min().item(),
                "rollout_is_ratio_fraction_high": masked_mean((raw > upper).float(), m).item(),
                "rollout_is_ratio_fraction_low": masked_mean((raw < lower).float(), m).item()}
    else:  # one value per unit, read in log space so a huge product is not lost to the ±20 clamp
        lv = unit_log_raw.double()  # (N,)
        # both capped at e^20 (verl caps only the max) so that the metric stays finite
        out |= {"rollout_is_max": math.exp(min(lv.max().item(), LOG_RATIO_CLAMP)),
                "rollout_is_min": math.exp(min(lv.min().item(), LOG_RATIO_CLAMP)),
                "rollout_is_ratio_fraction_high": (lv > math.log(upper)).double().mean().item(),
                "rollout_is_ratio_fraction_low": (lv < _log_or_inf(lower)).double().mean().item()}
    out |= _truncated_spread(w, m, upper)
    # per sequence: spread of the mean w, fractions on the mean RAW v (a mean of w ≤ U never exceeds U)
    out |= _seq_stats(_row_means(w, m), "rollout_is")
    out |= _seq_fractions(_row_means(raw, m), upper, lower, "rollout_is")
    return {f"rollout_corr/{key}": value for key, value in out.items()}


def applied_weight_metrics(weights: Tensor, keep: Tensor, upper: float) -> dict[str, float]:
    """`rollout_corr/applied_w_*`: the weights w (B, T) the loss applies, over the tokens of m′ = keep (B, T).

    Token-weighted mean/std (population)/min/max, ESS 1/mean((w/mean w)²) (verl's form, 0 when every
    weight is 0), fractions above C and below 1/C; per-sequence means of w over each non-empty row of m′.
    """
    valid = keep > 0
    w = weights[valid].double()  # (N′,)
    mean = w.mean()
    out = {"applied_w_mean": mean.item(), "applied_w_max": w.max().item(), "applied_w_min": w.min().item(),
           "applied_w_std": (w.square().mean() - mean.square()).clamp(min=0).sqrt().item(),
           "applied_w_eff_sample_size": (1.0 / (w / mean).square().mean()).item() if mean > 0 else 0.0,
           "applied_w_ratio_fraction_high": (w > upper).double().mean().item(),
           "applied_w_ratio_fraction_low": (w < 1.0 / upper).double().mean().item()}
    seq = _row_means(weights, keep)  # (B′,) mean applied weight per non-empty row of m′
    out |= _seq_stats(seq, "applied_w") | _seq_fractions(seq, upper, 1.0 / upper, "applied_w")
    return {f"rollout_corr/{key}": value for key, value in out.items()}


def raw_ratio_metrics(v: Tensor, unit_log_v: Tensor | None, m: Tensor, upper: float) -> dict[str, float]:
    """`rollout_corr/raw_ratio_*`: the value v (B, T) before truncation or masking, over m (B, T).

    unit_log_v: (N,) unclamped log v of each non-empty sequence at seq/geo level (`is_unit_log_values`; None at token
    level): max/min and the high/low fractions then use it in log space. The ESS is verl's pre-truncation
    form (v clamped to [1/C, C] before squaring); std is the population std of v.
    """
    lower = 1.0 / upper
    valid = m > 0
    rows = m.sum(-1) > 0  # (B,)
    mean = masked_mean(v, m)
    out = {"raw_ratio_mean": mean.item(),
           "raw_ratio_std": (masked_mean(v.square(), m) - mean.square()).clamp(min=0).sqrt().item()}
    if unit_log_v is None:
        out["raw_ratio_max"] = v[valid].max().item()
        out["raw_ratio_min"] = v[valid].min().item()
        out["raw_ratio_fraction_high"] = masked_mean((v > upper).float(), m).item()
        out["raw_ratio_fraction_low"] = masked_mean((v < lower).float(), m).item()
    else:
        lv = unit_log_v
        out["raw_ratio_max"] = math.exp(min(lv.max().item(), LOG_RATIO_CLAMP))
        out["raw_ratio_min"] = math.exp(max(lv.min().item(), -LOG_RATIO_CLAMP))
        out["raw_ratio_fraction_high"] = (lv > math.log(upper)).float().mean().item()
        out["raw_ratio_fraction_low"] = (lv < math.log(lower)).float().mean().item()
    clamped = v.clamp(lower, upper)  # verl clamps to [1/C, C] before squaring
    out["raw_ratio_eff_sample_size"] = 1.0 / masked_mean((clamped / (masked_mean(clamped, m) + 1e-8)).square(),
                                                         m).item()
    seq = (v * m).sum(-1)[rows] / m.sum(-1)[rows]  # (B′,) per-sequence mean value
    out |= _seq_stats(seq, "raw_ratio") | _seq_fractions(seq, upper, lower, "raw_ratio")
    return {f"rollout_corr/{key}": value for key, value in out.items()}
