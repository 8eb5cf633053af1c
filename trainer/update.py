"""One rollout batch → several optimizer steps (mini-batches, each accumulated over micro-batches).

Stages used by the loop: `old_logprobs` (no grad, unperturbed; `prepare_batch` in trainer/loop.py stores them as
`batch.old_logp`) and `update_policy` on the batch `prepare_batch` made, corrections included: per micro-batch
forward → loss → backward, then `optimizer_step` (global grad clip → non-finite guard → optimizer step). What is
optimized lives in `objective.py`; this module never branches on algorithm names. What every step of a run shares
is one `UpdateSettings`; Table 5's diagnostics attach as one optional `RatioProbe` (trainer/diagnostics/ratio_diagnostics.py),
which reads the update forward and never changes the step.

With `distributed.mixed_precision=fp16` a grad scaler (`trainer/runtime/distributed.py` build_grad_scaler) makes it
verl's sequence: scale(loss).backward() per micro-batch → unscale → clip → step unless a gradient overflowed →
update the scale.

Legend: B trajectories in the rollout batch, T response positions.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from agents.perturbation import LayerwisePerturbation, noise_seed
from trainer.config.algo_config import AlgoConfig
from trainer.config.train_config import TrainConfig
from trainer.diagnostics.ratio_diagnostics import RatioProbe
from trainer.objective.batch_objective import denominators, micro_batch_objective
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.types import Batch
from trainer.runtime.distributed import (
    SINGLE,
    DistContext,
    LocalGrads,
    clip_global_grad_norm,
    global_counts,
    reduce_replicated_grads,
)

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


@dataclass(frozen=True)
class UpdateSettings:
    """What every mini-batch step of a run shares; `from_config` reads it once from the run's config."""

    algo: AlgoConfig  # the objective (trainer/objective/batch_objective.py)
    temperature: float  # rollout.temperature: π_θ at the sampler's temperature, so its ratios to μ are meaningful
    micro_batch_size: int  # optim.micro_batch_size: rows per forward / backward (the loss cannot depend on it)
    grad_clip: float  # optim.grad_clip: max global grad norm
    norm_len: int | None = None  # T_norm of seq_mean_token_sum_norm: algo.loss_agg_norm_len or the response budget
    # this rank: under data parallelism the denominators, the loss, ALP's log σ gradients and the grad norm are
    # global, so every rank takes the same step decision; the other metrics are this rank's (the loop averages them)
    ctx: DistContext = field(default_factory=lambda: SINGLE)

    @classmethod
    def from_config(cls, cfg: TrainConfig, ctx: DistContext = SINGLE) -> UpdateSettings:
        """The settings of `cfg` on rank `ctx`."""
        return cls(cfg.algo, temperature=cfg.rollout.temperature, micro_batch_size=cfg.optim.micro_batch_size,
                   grad_clip=cfg.optim.grad_clip,
                   norm_len=cfg.algo.loss_agg_norm_len or cfg.rollout.max_response_tokens, ctx=ctx)


def update_policy(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, rows: torch.Tensor,
                  settings: UpdateSettings, *, perturbation: LayerwisePerturbation | None = None, noise_base: int = 0,
                  probe: RatioProbe | None = None, scaler: ShardedGradScaler | None = None) -> dict[str, float]:
    """One optimizer step on the mini-batch `rows` of a prepared `batch` (old_logp, advantages, corr_weights /
    corr_keep: a batch without them is refused); returns its metrics (`actor/*`, `loss/*`, `perturb/*`).

    With a `perturbation` (ALP), each micro-batch's forward AND backward run inside `perturbation.active`, seeded
    `noise_base + i` for micro-batch i, so recomputation sees the same noise. A `probe` observes each micro-batch
    after its backward and adds its `diag/*` metrics; a `scaler` (fp16) scales each loss before backward
    (`optimizer_step` unscales).
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    local_tokens, local_seqs = denominators(batch, rows)  # mini-batch denominators: micro-batching cannot change
    n_tokens, n_seqs = global_counts(settings.ctx, local_tokens, local_seqs)  # the loss; summed over ranks: nor ranks
    sums: dict[str, float] = {}
    total_loss = 0.0
    real_tokens = padded_tokens = 0
    for i, micro in enumerate(_chunks(rows, settings.micro_batch_size, batch)):
        sub = batch.select(micro)
        real_tokens += int(sub.attention_mask.sum())
        padded_tokens += sub.input_ids.numel()
        seed = noise_seed(noise_base + i, settings.ctx.rank)
        with perturbation.active(seed=seed) if perturbation else nullcontext():
            logp, entropy = compute_logprobs(model, sub, settings.temperature, with_entropy=True)
            loss, metrics = micro_batch_objective(settings.algo, sub, logp, entropy, n_tokens=n_tokens,
                                                  n_seqs=n_seqs, norm_len=settings.norm_len)
            (scaler.scale(loss) if scaler is not None else loss).backward()  # fp16: tiny gradients not flushed to 0
        if probe is not None:
            probe.observe(model, sub, logp, perturbation, seed, settings.temperature)
        total_loss += loss.item()
        weight = sub.loss_mask.sum().item() / local_tokens.item()  # token-weighted average of micro metrics
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + weight * value
    step, extra = optimizer_step(optimizer, total_loss, settings, perturbation, scaler)
    out = {f"actor/{k}": v for k, v in sums.items()}
    out |= step | {"perf/real_token_frac": real_tokens / max(padded_tokens, 1)} | extra
    return out | (probe.report() if probe is not None else {})


def optimizer_step(optimizer: torch.optim.Optimizer, total_loss: float, settings: UpdateSettings,
                   perturbation: LayerwisePerturbation | None = None,
                   scaler: ShardedGradScaler | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """The step after the accumulated backward: ({loss/policy, actor/grad_norm, actor/grad_norm_nonfinite}, the
    perturbation's and the loss scale's metrics). `total_loss` is this rank's sum of micro-batch losses.

    Under data parallelism ALP's log σ gradients and the loss are summed over ranks first. With a `scaler`
    (mixed_precision=fp16) the gradients are divided by the loss scale before anything reads them; a step whose
    gradients overflowed is skipped (counted in `actor/grad_norm_nonfinite`, flagged in `actor/fp16_overflow`)
    and the scale halved. The logged loss and grad norm are the unscaled ones.
    """
    ctx = settings.ctx
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
        grad_norm = clip_global_grad_norm(ctx, params, settings.grad_clip)
    else:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, settings.grad_clip).item()
    skipped = not (math.isfinite(grad_norm) and math.isfinite(total_loss))  # the same on every rank: both global
    if skipped:
        optimizer.zero_grad(set_to_none=True)  # non-finite loss or gradient (an fp16 overflow): skip, count it
    elif scaler is not None:
        scaler.step(local_grads)  # the optimizer's step (the scaler found no inf either: the norm is finite)
    else:
        optimizer.step()
    if scaler is not None:
        extra |= _update_loss_scale(scaler)
    return {"loss/policy": total_loss, "actor/grad_norm": grad_norm, "actor/grad_norm_nonfinite": float(skipped)}, extra


def _update_loss_scale(scaler: ShardedGradScaler) -> dict[str, float]:
    """Halve the scale after an overflow, double it after its growth interval of clean steps; returns the scale
    this step's gradients were multiplied by and whether they overflowed (1.0: the step was skipped)."""
    used = scaler.get_scale()
    scaler.update()
    return {"actor/loss_scale": used, "actor/fp16_overflow": float(scaler.get_scale() < used)}
