"""One rollout batch → several optimizer steps (mini-batches, each accumulated over micro-batches).

Stages used by the loop: `old_logprobs` (no grad, unperturbed; `prepare_batch` in trainer/loop.py stores them as
`batch.old_logp`) and `update_policy` (loss → backward → global grad clip → non-finite guard → optimizer step) on
the batch `prepare_batch` made, corrections included. What is optimized lives in `objective.py`; this module never
branches on algorithm names.

With `distributed.mixed_precision=fp16` a grad scaler (`trainer/distributed.py` build_grad_scaler) makes it
verl's sequence: scale(loss).backward() per micro-batch → unscale → clip → step unless a gradient overflowed →
update the scale.

Legend: B trajectories in the rollout batch, T response positions.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch
from torch import nn

from agents.perturbation import LayerwisePerturbation, noise_seed
from trainer.config import AlgoConfig
from trainer.distributed import (
    SINGLE,
    DistContext,
    LocalGrads,
    clip_global_grad_norm,
    global_counts,
    reduce_replicated_grads,
)
from trainer.logprobs import compute_logprobs
from trainer.objective import denominators, micro_batch_objective
from trainer.ratio_diagnostics import RatioProbe, layer_group_prob_shift, spaced_rows
from trainer.types import Batch

if TYPE_CHECKING:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


@torch.no_grad()
def old_logprobs(model: nn.Module, batch: Batch, temperature: float, micro_batch_size: int) -> torch.Tensor:
    """Trainer log-probs at θ_old for the whole batch, (B, T); same micro-batch composition as updates."""
    return clean_forward(model, batch, temperature, micro_batch_size)[0]


@torch.no_grad()
def clean_forward(model: nn.Module, batch: Batch, temperature: float, micro_batch_size: int,
                  with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logp (B, T), entropy (B, T) or None) of the unperturbed model in eval mode, no grad."""
    was_training = model.training
    model.eval()
    out = torch.zeros_like(batch.rollout_logp)
    ent = torch.zeros_like(batch.rollout_logp) if with_entropy else None
    for rows in _chunks(torch.arange(len(batch)), micro_batch_size, batch):
        sub = batch.select(rows)
        logp, entropy = compute_logprobs(model, sub, temperature, with_entropy=with_entropy)
        out[rows, : logp.shape[1]] = logp
        if ent is not None:
            ent[rows, : entropy.shape[1]] = entropy
    model.train(was_training)
    return out, ent


def _chunks(rows: torch.Tensor, size: int, batch: Batch) -> list[torch.Tensor]:
    """Micro-batches of `rows`, length-sorted so each is padded only to its own longest row.

    The loss uses mini-batch denominators, so grouping rows differently cannot change it.
    """
    lengths = (batch.response_start + batch.response_len)[rows]
    rows = rows[torch.argsort(lengths, stable=True)]
    return [rows[i: i + size] for i in range(0, len(rows), size)]


def minibatch_rows(batch_size: int, num_minibatches: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Shuffle rows once and split them into `num_minibatches` near-equal mini-batches."""
    perm = torch.randperm(batch_size, generator=generator)
    return [chunk for chunk in perm.tensor_split(num_minibatches) if len(chunk)]


def update_policy(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, rows: torch.Tensor, *,
                  algo: AlgoConfig, temperature: float, micro_batch_size: int, grad_clip: float,
                  perturbation: LayerwisePerturbation | None = None, noise_base: int = 0,
                  norm_len: int | None = None, diagnose: tuple[str, ...] = (), extra_forwards: bool = True,
                  diag_rows: int = 0, ctx: DistContext = SINGLE,
                  scaler: ShardedGradScaler | None = None) -> dict[str, float]:
    """One optimizer step on the mini-batch `rows`; returns its metrics (`actor/*`, `loss/*`, `perturb/*`).

    `batch` is a prepared rollout batch: old_logp, advantages and the corrections of `prepare_corrections`
    (corr_weights / corr_keep, once per rollout batch; a batch without them is refused).

    With a `perturbation` (ALP), the update forward AND its backward run inside `perturbation.active`,
    seeded per micro-batch (`noise_base + i`) so recomputation sees the same noise. `diagnose` holds the key
    suffixes ("" first mini-batch, "_last" last) under which this mini-batch's Table 5 ratios are logged
    (`trainer/ratio_diagnostics.py`). With `extra_forwards` (a diagnostics step), a perturbed update also runs a
    no-grad clean forward of `diag_rows` rows of each micro-batch of the last mini-batch (its r_upd, r_byp) and,
    per layer group, one forward of `diag_rows` rows of the first micro-batch (|Δp| per group); 0: all rows.

    Under data parallelism (`ctx`, trainer/distributed.py) `rows` are this rank's: the denominators, the loss,
    the ALP log σ gradients and the grad norm are global, so every rank takes the same step decision; the other
    metrics are this rank's (the loop averages them over ranks).

    With a `scaler` (mixed_precision=fp16) each micro-batch's loss is multiplied by the loss scale before backward
    and the gradients divided by it before anything reads them; a step whose gradients overflowed is skipped
    (counted in `actor/grad_norm_nonfinite`, flagged in `actor/fp16_overflow`) and the scale halved. The logged
    loss and grad norm are the unscaled ones.
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    local_tokens, local_seqs = denominators(batch, rows)  # mini-batch denominators: micro-batching cannot change
    n_tokens, n_seqs = global_counts(ctx, local_tokens, local_seqs)  # the loss; summed over ranks: nor can ranks
    sums: dict[str, float] = {}
    total_loss = 0.0
    real_tokens = padded_tokens = 0
    probe = RatioProbe(algo) if diagnose else None
    for i, micro in enumerate(_chunks(rows, micro_batch_size, batch)):
        sub = batch.select(micro)
        real_tokens += int(sub.attention_mask.sum())
        padded_tokens += sub.input_ids.numel()
        noise = perturbation.active(seed=noise_seed(noise_base + i, ctx.rank)) if perturbation else nullcontext()
        with noise:
            logp, entropy = compute_logprobs(model, sub, temperature, with_entropy=True)
            loss, metrics = micro_batch_objective(algo, sub, logp, entropy, n_tokens=n_tokens, n_seqs=n_seqs,
                                                  norm_len=norm_len)
            (scaler.scale(loss) if scaler is not None else loss).backward()  # fp16: tiny gradients not flushed to 0
        if probe is not None and perturbation is not None and i == 0 and "" in diagnose and extra_forwards:
            probe.extra |= layer_group_prob_shift(model, sub.select(spaced_rows(len(sub), diag_rows)), perturbation,
                                                  noise_seed(noise_base, ctx.rank), temperature)
        if probe is not None:
            clean, rows = _clean_logp(model, sub, logp, temperature, perturbation is not None, "" in diagnose,
                                      extra_forwards, diag_rows)
            probe.add(logp, clean, sub.old_logp, sub.rollout_logp, sub.loss_mask, perturbed=perturbation is not None,
                      clean_rows=rows)
        total_loss += loss.item()
        weight = sub.loss_mask.sum().item() / local_tokens.item()  # token-weighted average of micro metrics
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + weight * value
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if ctx.enabled:
        reduce_replicated_grads(ctx, params)  # ALP's log σ: each rank holds its rows' share of the gradient
        total_loss = float(ctx.all_reduce_sum(torch.tensor(total_loss, dtype=torch.float64)))
    local_grads = None
    if scaler is not None:  # every param group (ALP's log σ too), before anything reads a gradient
        local_grads = LocalGrads(optimizer)
        scaler.unscale_(local_grads)  # found-inf is all-reduced over ranks
    extra = perturbation.metrics() if perturbation else {}  # before the step: log σ gradient norm
    if ctx.fsdp:
        grad_norm = clip_global_grad_norm(ctx, params, grad_clip)
    else:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip).item()
    skipped = not (math.isfinite(grad_norm) and math.isfinite(total_loss))  # the same on every rank: both global
    if skipped:
        optimizer.zero_grad(set_to_none=True)  # non-finite loss or gradient (an fp16 overflow): skip, count it
    elif scaler is not None:
        scaler.step(local_grads)  # the optimizer's step (the scaler found no inf either: the norm is finite)
    else:
        optimizer.step()
    if scaler is not None:
        extra |= _update_loss_scale(scaler)
    out = {f"actor/{k}": v for k, v in sums.items()}
    out.update({"loss/policy": total_loss, "actor/grad_norm": grad_norm,
                "actor/grad_norm_nonfinite": float(skipped),
                "perf/real_token_frac": real_tokens / max(padded_tokens, 1)})
    out.update(extra)
    for suffix in diagnose:
        out.update(probe.metrics(suffix))
    return out


def _update_loss_scale(scaler: ShardedGradScaler) -> dict[str, float]:
    """Halve the scale after an overflow, double it after its growth interval of clean steps; returns the scale
    this step's gradients were multiplied by and whether they overflowed (1.0: the step was skipped)."""
    used = scaler.get_scale()
    scaler.update()
    return {"actor/loss_scale": used, "actor/fp16_overflow": float(scaler.get_scale() < used)}


def _clean_logp(model: nn.Module, sub: Batch, logp: torch.Tensor, temperature: float, perturbed: bool,
                first: bool, extra_forward: bool, max_rows: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(π_θ without noise, the rows of `sub` it covers or None for all): the update forward itself when
    unperturbed; on the first mini-batch θ = θ_old, so `old_logp`; otherwise, with `extra_forward`, one no-grad
    forward outside the noise of `max_rows` evenly spaced rows (r, T'); else (None, None)."""
    if not perturbed:
        return logp.detach(), None
    if first:
        return sub.old_logp, None
    if not extra_forward:
        return None, None
    rows = spaced_rows(len(sub), max_rows)
    with torch.no_grad():
        return compute_logprobs(model, sub.select(rows), temperature)[0], rows
