"""QUATRO — Query-Adaptive Trust-Region Policy Optimization: per-query duals (arXiv 2602.04620; reference §3.7).

The paper states an exact per-query trust region solved through Lagrangian duality, per-prompt dual
variables and a stabilizing log-ratio term, with no global clip; the method body was not available when this
was written, so everything below is a reconstruction **[R]**, every choice exposed in `AlgoConfig` (`quatro_*`).

For query x with G samples and centred advantages A_i (std optional: the solution is scale-free):

    max_π E_π[A]  s.t.  KL(π‖π_old) ≤ δ   ⇒   π*(y) ∝ π_old(y)·e^{A(y)/λ_x}

Empirical dual over the G samples (w_λ = softmax(A/λ), U uniform):

    g(λ) = λδ + λ·log((1/G) Σ_i e^{A_i/λ}),   g′(λ) = δ − KL(w_λ‖U)   (convex for λ > 0)

λ_x = argmin g = the root of KL(w_λ‖U) = δ (KL decreases in λ from log(G/#argmax A) to 0), found by
bisection on log λ with logsumexp in float64 and clamped to [λ_min, λ_max]. If δ ≥ log(G/#argmax A) the
constraint is inactive and λ_x = λ_min; a degenerate group (all A equal) has no dual (w ≡ U) and is
skipped. Small δ: λ_x ≈ std_pop(A)/√(2δ), so GRPO's std division is the small-step approximation.

`quatro_targets(algo, batch)` runs once per rollout batch (λ frozen for every mini-batch) and gives the
target log-ratios (stored as `batch.quatro_targets`, read by the loss in place of the advantages) t_i = log(G·w_i) = A_i/λ_x − log Z_x (clamped to
±`quatro_log_ratio_clamp`), which the `quatro` loss in `trainer/objective/losses.py` drives each sample's log r
toward. `realized_kl_metrics` compares the realized per-query KL after an update with δ.
Design choices beyond the paper: duals use every row of the group (also rows whose loss mask is 0:
they are samples of π_old all the same) but the ones outside its advantage statistics (`members`: an episode the
infrastructure failed has no reward of the policy's, trainer/objective/infra_failures.py); A follows
`adv_norm_by_std` / `adv_leave_one_out`. A sample is an episode: an episode of several traces (agents/trajectory.py)
has one dual weight and one target, which each of its traces' geo log-ratio is driven to (at the seq level it is
refused, `MULTI_TRACE_SEQ_REFUSAL`).

Legend: B rows of the rollout batch, T response positions, Q queries (groups), G samples per query.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trainer.config.algo_config import AlgoConfig
from trainer.objective.advantages import group_advantages
from trainer.objective.losses import MULTI_TRACE_SEQ_REFUSAL, level_log_ratio
from trainer.objective.types import Batch, EpisodeRows

BISECT_ITERS = 100  # halvings of the log-λ bracket: ln(1e8)·2^-100 is far below float64 resolution
DEGENERATE_TOL = 1e-12  # max − min advantage under which a group counts as degenerate


def group_matrix(values: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rows → padded per-query matrix: values (B,), group_ids (B,) → (mat (Q, G), valid (Q, G), rows (Q, G)).

    `rows[q, j]` is the batch row of the j-th sample of query q (−1 on padding; `mat` is 0 there).
    """
    groups, inverse = group_ids.unique(return_inverse=True)  # (Q,), (B,)
    sizes = torch.bincount(inverse, minlength=len(groups))
    order = torch.argsort(inverse, stable=True)  # rows sorted by query
    starts = torch.cumsum(sizes, 0) - sizes
    slot = torch.arange(len(values)) - starts[inverse[order]]  # position of each sorted row in its query
    rows = torch.full((len(groups), int(sizes.max())), -1, dtype=torch.long)
    rows[inverse[order], slot] = order
    valid = rows >= 0
    mat = torch.zeros(rows.shape, dtype=values.dtype)
    mat[valid] = values[rows[valid]]
    return mat, valid, rows


def _log_weights(adv: Tensor, valid: Tensor, lam: Tensor) -> Tensor:
    """log(G·w_λ) per sample, (Q, G): A/λ − logsumexp(A/λ) + log G; −inf on padding."""
    z = (adv / lam[:, None]).masked_fill(~valid, -math.inf)
    size = valid.sum(-1, keepdim=True).to(adv.dtype)  # (Q, 1)
    return z - torch.logsumexp(z, -1, keepdim=True) + size.log()


def kl_to_uniform(adv: Tensor, valid: Tensor, lam: Tensor) -> Tensor:
    """KL(w_λ‖U) per query, (Q,): Σ_i w_i log(G w_i) with w = softmax(A/λ) over the valid samples."""
    log_gw = _log_weights(adv, valid, lam)
    w = torch.softmax(log_gw, -1)  # the log G shift cancels in the softmax
    return torch.where(valid, w * log_gw, torch.zeros_like(w)).sum(-1)


def dual_objective(adv: Tensor, valid: Tensor, lam: Tensor, delta: float) -> Tensor:
    """g(λ) = λδ + λ·log mean_i e^{A_i/λ} per query, (Q,) (used by the tests' brute-force check)."""
    z = (adv / lam[:, None]).masked_fill(~valid, -math.inf)
    size = valid.sum(-1).to(adv.dtype)
    return lam * delta + lam * (torch.logsumexp(z, -1) - size.log())


def solve_duals(adv: Tensor, valid: Tensor, delta: float, lam_min: float,
                lam_max: float) -> tuple[Tensor, dict[str, Tensor]]:
    """λ_x = argmin_λ g(λ) clamped to [λ_min, λ_max], per query: adv, valid (Q, G) → λ (Q,) float64.

    Returns the status masks `degenerate`, `inactive` (δ ≥ log(G/#argmax A): λ_min), `clamped_low`
    (root below λ_min although the constraint binds), `clamped_high` (root above λ_max), each (Q,) bool.
    """
    if not delta > 0 or not 0 < lam_min < lam_max:
        raise ValueError(f"QUATRO needs quatro_delta > 0 and 0 < quatro_lambda_min < quatro_lambda_max, got "
                         f"δ={delta}, λ range [{lam_min}, {lam_max}]")
    adv = adv.double()
    big = adv.masked_fill(~valid, -math.inf).amax(-1, keepdim=True)  # (Q, 1)
    small = adv.masked_fill(~valid, math.inf).amin(-1, keepdim=True)
    degenerate = (big - small).squeeze(-1) <= DEGENERATE_TOL
    n_max = ((adv >= big - DEGENERATE_TOL) & valid).sum(-1)  # (Q,) #argmax A
    inactive = ~degenerate & (delta >= torch.log(valid.sum(-1) / n_max))
    lo = torch.full((adv.shape[0],), math.log(lam_min), dtype=torch.float64)
    hi = torch.full_like(lo, math.log(lam_max))
    low_ok = kl_to_uniform(adv, valid, lo.exp()) <= delta  # root at or below λ_min
    high_bad = kl_to_uniform(adv, valid, hi.exp()) >= delta  # root at or above λ_max
    for _ in range(BISECT_ITERS):  # invariant: KL(e^lo) > δ ≥ KL(e^hi) for the bracketed queries
        mid = 0.5 * (lo + hi)
        above = kl_to_uniform(adv, valid, mid.exp()) > delta  # λ too small: the step is too large
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    lam = torch.exp(0.5 * (lo + hi))
    lam = torch.where(low_ok, torch.full_like(lam, lam_min), lam)
    lam = torch.where(high_bad & ~low_ok, torch.full_like(lam, lam_max), lam)
    lam = torch.where(degenerate, torch.full_like(lam, lam_max), lam)  # w ≡ U whatever λ: no update
    status = {"degenerate": degenerate, "inactive": inactive,
              "clamped_low": low_ok & ~inactive & ~degenerate, "clamped_high": high_bad & ~low_ok & ~degenerate}
    return lam, status


def target_log_ratios(adv: Tensor, valid: Tensor, lam: Tensor, clamp: float) -> Tensor:
    """t = log(G·w_λ) = A/λ − log Z, clamped to ±clamp (0: no clamp); 0 for padding, (Q, G)."""
    t = _log_weights(adv.double(), valid, lam.double())
    if clamp > 0:
        t = t.clamp(-clamp, clamp)
    return torch.where(valid, t, torch.zeros_like(t))


def _quantiles(x: Tensor, prefix: str) -> dict[str, float]:
    if x.numel() == 0:
        return {}
    q = torch.quantile(x.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {f"{prefix}_p10": q[0], f"{prefix}_p50": q[1], f"{prefix}_p90": q[2],
            f"{prefix}_mean": x.double().mean().item(), f"{prefix}_min": x.min().item(), f"{prefix}_max": x.max().item()}


def quatro_targets(algo: AlgoConfig, batch: Batch,
                   members: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
    """Solve λ_x for every query of the rollout batch; returns the targets t_b·m (B, T) and `quatro/*` metrics.

    Needs `algo.quatro_delta > 0`, `batch.rewards`, `batch.group_ids` (B,) and `batch.loss_mask` (B, T). The
    caller stores the targets as `batch.quatro_targets`, which the `quatro` loss reads in place of advantages.
    Metrics: λ quantiles over non-degenerate queries, solved KL(w_λ‖U) vs δ, status fractions. `members` (E,)
    bool: the episodes that take part (default: all; `group_advantages`).
    """
    episodes = EpisodeRows.of(batch.episode_index, len(batch))
    if not episodes.one_row_each and algo.upd_level == "seq":
        raise ValueError(MULTI_TRACE_SEQ_REFUSAL)
    first = episodes.first_rows()  # (E,) a row of each episode: its reward and group are the episode's
    group_ids = batch.group_ids[first]
    adv, _ = group_advantages(batch.rewards[first], group_ids, members=members,
                              norm_by_std=algo.adv_norm_by_std, leave_one_out=algo.adv_leave_one_out)  # (E,)
    mat, valid, rows = group_matrix(adv.double(), group_ids)
    if members is not None:
        valid = valid & members[rows.clamp(min=0)]  # (Q, G)
    lam, status = solve_duals(mat, valid, algo.quatro_delta, algo.quatro_lambda_min, algo.quatro_lambda_max)
    target = target_log_ratios(mat, valid, lam, algo.quatro_log_ratio_clamp)  # (Q, G)
    target[status["degenerate"]] = 0.0  # exactly 0 (not rounding noise), so the loss skips these rows
    per_episode = torch.zeros(episodes.count, dtype=torch.float64)
    per_episode[rows[valid]] = target[valid]
    targets = episodes.per_row(per_episode).to(batch.loss_mask.dtype)[:, None] * batch.loss_mask  # (B, T)
    live = ~status["degenerate"]
    solved_kl = kl_to_uniform(mat, valid, lam)[live]
    out = {f"quatro/{k}_frac": v.double().mean().item() for k, v in status.items()}
    out |= _quantiles(lam[live], "quatro/lambda")
    if live.any():
        out["quatro/solved_kl_mean"] = solved_kl.mean().item()
        out["quatro/solved_kl_over_delta"] = solved_kl.mean().item() / algo.quatro_delta
        out["quatro/target_abs_mean"] = target[valid & live[:, None]].abs().mean().item()
    return targets, out


@torch.no_grad()
def realized_kl_metrics(algo: AlgoConfig, batch: Batch, new_logp: Tensor) -> dict[str, float]:
    """Realized per-query KL after an update vs the budget δ (reference §3.7 "realized per-query KL").

    new_logp: (B, T) trainer log-probs at the updated weights (a no-grad forward); the sample ratio
    r_i uses the configured `upd_level` against `batch.old_logp`. Per query the reweighted empirical
    distribution ŵ = r / Σ r is compared with U exactly as the dual constraint: KL(ŵ‖U) = Σ ŵ log(G ŵ).
    """
    if not algo.quatro_delta:
        return {}
    mask = batch.loss_mask
    log_r = level_log_ratio(new_logp - batch.old_logp, mask, algo.upd_level)  # (B, T)
    row = (log_r * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,) per-row log r (token level: mean)
    mat, valid, _ = group_matrix(row.double(), batch.group_ids)
    sampled, _, _ = group_matrix((mask.sum(-1) > 0).double(), batch.group_ids)
    valid = valid & (sampled > 0)  # rows without sampled tokens carry no ratio
    has = valid.sum(-1) > 1
    if not has.any():
        return {}
    log_gw = mat.masked_fill(~valid, -math.inf)[has]
    log_gw = log_gw - torch.logsumexp(log_gw, -1, keepdim=True) + valid[has].sum(-1, keepdim=True).double().log()
    w = torch.softmax(log_gw, -1)
    kl = torch.where(valid[has], w * log_gw, torch.zeros_like(w)).sum(-1)  # (Q',)
    out = _quantiles(kl, "quatro/realized_kl")
    out["quatro/realized_kl"] = kl.mean().item()
    out["quatro/realized_kl_over_delta"] = kl.mean().item() / algo.quatro_delta
    return out
