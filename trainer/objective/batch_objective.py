"""The per-micro-batch objective: policy loss from the registry + entropy term, aggregated.

`L = agg(w ⊙ ℓ, m′) − β_H·agg(H, m′) + β·agg(KL(π_θ ‖ π_ref), m′)` (reference §2.6; the KL term only with
`algo.kl_coef` > 0 and not `kl_in_reward`, π_ref the frozen starting policy, `trainer/reference.py`). Everything
that decides *what* is optimized lives here, driven by `AlgoConfig` fields only (presets fill them; nothing
branches on a preset's name):

- `prepare_corrections(algo, batch)`: once per rollout batch, after the old log-probs: correction weights
  w and rejection mask m′ (`trainer/objective/corrections.py`), which `prepare_batch` (trainer/loop.py) stores as
  `corr_weights` / `corr_keep`. Nothing below computes them again: batch normalization needs the whole rollout
  batch and verl-semantics rejection must leave m′ before the denominators are counted, so a batch without them
  is refused rather than corrected per micro-batch.
- `denominators(batch, rows)`: the mini-batch token / sequence counts over m′, so verl-semantics MIS
  rejections leave the denominator and micro-batching cannot change the loss.
- `micro_batch_objective(...)`: the scalar loss of one micro-batch and its metrics. Dr.GRPO's
  seq-mean-token-sum-norm divides by a constant T_norm (`norm_len`, else `algo.loss_agg_norm_len`;
  the caller resolves 0 to rollout.max_response_tokens), never by the batch's padded width.

Flat loss hyperparameters are taken *by name* from `AlgoConfig` (`loss_kwargs`): a registry entry's
keyword `clip_low` receives `algo.clip_low`, and so on; the entries and `compute_correction` state no defaults, so
the config is the one place their values come from.

Legend: B rows of the rollout batch, b rows of the micro-batch, T response positions.
"""

from __future__ import annotations

import inspect

import torch

from trainer.config.algo_config import AlgoConfig
from trainer.objective.corrections import BatchSum, compute_correction
from trainer.objective.losses import (
    REQUIRED_AGG,
    aggregate,
    get_policy_loss,
    kl_penalty,
    masked_fill_zero,
    masked_mean,
)
from trainer.objective.offpolicy_masks import m2po_keep, opsm_keep
from trainer.objective.types import Batch


def _keyword_names(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]


def loss_kwargs(algo: AlgoConfig, name: str | None = None) -> dict:
    """Flat hyperparameters for registry entry `name` (default `algo.policy_loss`), by field name."""
    fn = get_policy_loss(name or algo.policy_loss)
    names = [n for n in _keyword_names(fn) if n != "weights"]
    missing = [n for n in names if not hasattr(algo, n)]
    if missing:
        raise ValueError(f"policy loss {name or algo.policy_loss!r} takes {missing}, which AlgoConfig lacks; "
                         "add the field(s) to AlgoConfig")
    return {n: getattr(algo, n) for n in names}


def correction_kwargs(algo: AlgoConfig) -> dict:
    """Flat correction settings (`compute_correction` keywords are AlgoConfig field names, but for the rank sum)."""
    return {n: getattr(algo, n) for n in _keyword_names(compute_correction) if n != "batch_sum"}


def prepare_corrections(algo: AlgoConfig, batch: Batch,
                        batch_sum: BatchSum | None = None) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """w and m′ once for the rollout batch (needs `batch.old_logp`): (weights (B, T), keep (B, T), `rollout_corr/*`),
    which `prepare_batch` (trainer/loop.py) stores as `batch.corr_weights` / `batch.corr_keep`. `batch_sum` sums
    over data-parallel ranks (batch-normalized weights use the global mean)."""
    if batch.old_logp is None:
        raise ValueError("prepare_corrections: batch.old_logp is None; run the old-log-prob stage first")
    corr = compute_correction(batch.old_logp, batch.rollout_logp, batch.loss_mask, **correction_kwargs(algo),
                              batch_sum=batch_sum)
    if algo.m2_threshold is None:
        return corr.weights, corr.keep, corr.metrics
    m2_keep, m2_metrics = m2po_keep(batch.old_logp, batch.rollout_logp, corr.keep, threshold=algo.m2_threshold)
    return corr.weights * m2_keep, m2_keep, corr.metrics | {f"rollout_corr/{k}": v for k, v in m2_metrics.items()}


def prepared_corrections(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, m′) that `prepare_corrections` computed for the rollout batch, (B, T) each; a batch without them is an
    error (the module docstring says why they are never computed per micro-batch)."""
    if batch.corr_weights is None or batch.corr_keep is None:
        raise ValueError("the batch has no corr_weights / corr_keep: call prepare_corrections(algo, batch) once per "
                         "rollout batch, after the old log-probs, and store them on the batch before the update "
                         "(trainer/loop.py prepare_batch does)")
    return batch.corr_weights, batch.corr_keep


def denominators(batch: Batch, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N_tok, B′) of the mini-batch `rows` over m′: valid tokens and non-empty rows (reference §2.3)."""
    mask = prepared_corrections(batch)[1][rows]  # (b, T)
    return mask.sum().clamp(min=1.0), (mask.sum(-1) > 0).sum().clamp(min=1).float()


def agg_norm_len(algo: AlgoConfig, norm_len: int | None = None) -> int | None:
    """T_norm of seq-mean-token-sum-norm: `norm_len` if given, else `algo.loss_agg_norm_len`; None otherwise.

    The constant must be resolved by the caller that sees the whole config (0 in AlgoConfig means
    rollout.max_response_tokens), so a missing one is an error, never the padded width of the batch.
    """
    if algo.loss_agg != "seq-mean-token-sum-norm":
        return None
    value = norm_len if norm_len else algo.loss_agg_norm_len
    if not value or value <= 0:
        raise ValueError("algo.loss_agg=seq-mean-token-sum-norm needs a constant T_norm: set "
                         "algo.loss_agg_norm_len > 0, or pass norm_len=rollout.max_response_tokens to the objective "
                         f"(got norm_len={norm_len}, algo.loss_agg_norm_len={algo.loss_agg_norm_len})")
    return int(value)


def micro_batch_objective(algo: AlgoConfig, sub: Batch, logp: torch.Tensor, entropy: torch.Tensor, *,
                          n_tokens: torch.Tensor, n_seqs: torch.Tensor,
                          norm_len: int | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of one micro-batch (its share of the mini-batch loss) and its metrics.

    logp, entropy: (b, T) from the update forward (perturbed for ALP); `sub` carries old_logp,
    rollout_logp, advantages, loss_mask and the prepared corr_weights / corr_keep (b, T). Without a correction w
    is 1 on m′ (an exact no-op), except that a paper-semantics veto zeroes its rows through w.
    `n_tokens` / `n_seqs` are the mini-batch denominators over m′ (`denominators`). `norm_len` is
    seq-mean-token-sum-norm's T_norm (`agg_norm_len`: falls back to `algo.loss_agg_norm_len`).
    """
    required = REQUIRED_AGG.get(algo.policy_loss)
    if required and algo.loss_agg != required:
        raise ValueError(f"policy loss {algo.policy_loss!r} needs algo.loss_agg={required}, got {algo.loss_agg}")
    t_norm = agg_norm_len(algo, norm_len)
    loss_fn = get_policy_loss(algo.policy_loss)
    weights, keep = prepared_corrections(sub)
    old = masked_fill_zero(sub.old_logp, keep)  # non-finite log-probs of rejected tokens never reach the loss
    rollout = masked_fill_zero(sub.rollout_logp, keep)
    # QUATRO drives each sample's log-ratio toward its trust-region target instead of weighting by an advantage
    signal = sub.quatro_targets if sub.quatro_targets is not None else sub.advantages
    per_token, metrics = loss_fn(logp, old, rollout, signal, keep, weights=weights, **loss_kwargs(algo))
    if algo.opsm_delta is not None:  # sequences off-policy against a negative advantage leave the policy term only
        opsm, opsm_metrics = opsm_keep(logp, rollout, sub.advantages, keep, delta=algo.opsm_delta)
        per_token, metrics = per_token * opsm, metrics | opsm_metrics
    agg = {"n_tokens": n_tokens, "n_seqs": n_seqs, "norm_len": t_norm}  # mini-batch denominators
    loss = aggregate(per_token, keep, algo.loss_agg, **agg)
    if algo.entropy_coef:
        loss = loss - algo.entropy_coef * aggregate(entropy, keep, algo.loss_agg, **agg)
    if algo.kl_coef and not algo.kl_in_reward:  # verl use_kl_loss: β·agg(KL(π_θ ‖ π_ref)) on m′
        if sub.ref_logp is None:
            raise ValueError("algo.kl_coef > 0 needs batch.ref_logp (the reference forward) before the update")
        kl = kl_penalty(logp, masked_fill_zero(sub.ref_logp, keep), kind=algo.kl_type, old_logp=old)  # (b, T)
        loss = loss + algo.kl_coef * aggregate(kl, keep, algo.loss_agg, **agg)
        metrics["kl_loss"] = masked_mean(kl.detach(), keep).item()
    metrics["entropy_update"] = masked_mean(entropy.detach(), sub.loss_mask).item()
    return loss, metrics
