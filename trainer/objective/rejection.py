"""Rejection by divergence between trainer and sampler: verl's `rollout_rs` options, on their definitions.

Per sampled token, with the clamped log-ratio ℓ = ⟦log π_train(θ_old) − log μ⟧ (±20, as verl's SAFETY_BOUND):
k1 = −ℓ, k2 = ½ℓ², k3 = e^ℓ − 1 − ℓ. An option is `<level>_k<n>`:

- `token_k*`: each token is kept or rejected on its own value;
- `seq_sum_k*` / `seq_mean_k*`: a whole sequence on the sum / mean of its tokens' values (`seq_mean_k1` is the
  geometric-mean ratio band: exp(mean ℓ) ∈ [1/U, 1/L]); `seq_max_k2` / `seq_max_k3`: on its largest value.

Thresholds (`rollout_rs_threshold`, one shared or one per option, comma separated, as verl): k2 / k3 options
take an upper bound on the statistic; k1 options take ratio bounds `L:U` or verl's `L_U` (or `U` alone,
L = 1/U) and keep log L ≤ statistic ≤ log U. Quote verl's form in YAML and on the command line: unquoted,
YAML reads `0.5_1` as the number 0.51. Several options (`token_k1,seq_max_k3`) must all pass. A rejected token leaves m′,
so it leaves the loss denominators too, as verl's modified response mask does.

Metrics (`rollout_corr/`, verl's names): `rollout_rs_{option}_masked_fraction` (tokens) and
`rollout_rs_{option}_seq_masked_fraction` (non-empty sequences with a rejected token); `rs_masked_fraction` over
all options together. Source: verl `trainer/ppo/rollout_corr_helper.py` `compute_rollout_rejection_mask`.

Legend: B rows, T response positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

SAFETY_BOUND = 20.0  # |ℓ| clamp before exp (verl's bound)
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


@dataclass(frozen=True)
class RSOption:
    """One criterion: `name`, its statistic's bounds (k1: log-ratio bounds, else lower is None)."""

    name: str
    lower: float | None
    upper: float


def parse_rs(options: str, thresholds: str) -> list[RSOption]:
    """`rollout_rs` / `rollout_rs_threshold` → criteria ([] when `options` is empty); ValueError names the fault."""
    names = list(dict.fromkeys(o.strip() for o in options.split(",") if o.strip()))
    if not names:
        return []
    unknown = [n for n in names if n not in RS_OPTIONS]
    if unknown:
        raise ValueError(f"algo.rollout_rs: unknown option(s) {unknown}; valid: {', '.join(RS_OPTIONS)}")
    specs = [s.strip() for s in str(thresholds).split(",") if s.strip()]
    if len(specs) not in (1, len(names)):
        raise ValueError(f"algo.rollout_rs_threshold={thresholds!r}: give one threshold for all options or one per "
                         f"option ({len(names)}: {', '.join(names)})")
    specs = specs * len(names) if len(specs) == 1 else specs
    return [_option(name, spec) for name, spec in zip(names, specs, strict=True)]


def _option(name: str, spec: str) -> RSOption:
    where = f"algo.rollout_rs_threshold for {name}"
    try:
        if name.endswith("k1"):
            lo, _, hi = spec.replace(":", "_").partition("_")
            upper = float(hi or lo)
            lower = float(lo) if hi else 1.0 / upper
            if not 0 < lower <= upper:
                raise ValueError
            return RSOption(name, math.log(lower), math.log(upper))
        if "_" in spec or ":" in spec or float(spec) <= 0:
            raise ValueError
        return RSOption(name, None, float(spec))
    except (ValueError, ZeroDivisionError):
        form = "ratio bounds L:U (or verl's L_U) with 0 < L <= U, or U alone (L = 1/U)" if name.endswith("k1") else \
            "one positive upper bound"
        raise ValueError(f"{where}: {spec!r} is not {form}") from None


def _statistic(option: RSOption, values: Tensor, m: Tensor) -> Tensor:
    """The option's statistic per token (b, T), sequence options broadcast over their row."""
    level = option.name.rsplit("_", 1)[0]
    if level == "token":
        return values
    if level == "seq_sum":
        seq = (values * m).sum(-1)
    elif level == "seq_mean":
        seq = (values * m).sum(-1) / m.sum(-1).clamp(min=1.0)
    else:  # seq_max over the sampled tokens (0 for an empty row)
        seq = values.masked_fill(m == 0, -math.inf).max(-1).values
        seq = torch.where(torch.isinf(seq), torch.zeros_like(seq), seq)
    return seq[:, None].expand_as(values)


def divergence_rejection(delta: Tensor, m: Tensor, options: list[RSOption]) -> tuple[Tensor, dict[str, float]]:
    """(keep (B, T) ∈ {0, 1}, metrics): the tokens of m every option keeps; delta = log π_train − log μ."""
    log_r = delta.double().clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B, T)
    kinds = {"k1": -log_r, "k2": 0.5 * log_r.square(), "k3": torch.expm1(log_r) - log_r}
    keep = m.double().clone()
    rows = m.sum(-1) > 0  # (B,)
    metrics: dict[str, float] = {}
    for option in options:
        stat = _statistic(option, kinds[option.name[-2:]], m.double())
        ok = stat <= option.upper
        if option.lower is not None:
            ok &= stat >= option.lower
        rejected = (~ok).double() * m  # (B, T)
        keep = keep * ok.double()
        metrics |= _fractions(f"rollout_corr/rollout_rs_{option.name}", rejected, m, rows)
    rejected_all = (1.0 - keep) * m
    metrics["rollout_corr/rs_masked_fraction"] = _fractions("", rejected_all, m, rows)["_masked_fraction"]
    return keep.to(m.dtype), metrics


def _fractions(prefix: str, rejected: Tensor, m: Tensor, rows: Tensor) -> dict[str, float]:
    tokens = (rejected.sum() / m.sum().clamp(min=1)).item()
    seqs = (rejected.sum(-1)[rows] > 0).double().mean().item() if rows.any() else 0.0
    return {f"{prefix}_masked_fraction": tokens, f"{prefix}_seq_masked_fraction": seqs}
