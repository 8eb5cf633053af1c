"""One rollout batch → several optimizer steps (mini-batches, each accumulated over micro-batches), and what one
micro-batch optimizes.

`update_policy` runs on the batch `prepare_batch` (trainer/loop.py) made, corrections included: per micro-batch
forward (`compute_logprobs`, trainer/objective/logprobs.py) → `micro_batch_objective` → backward, then
`optimizer_step` (global grad clip → non-finite guard → optimizer step, at VCPO's ESS-scaled lr under
`algo.vcpo_lr_rule`, trainer/algorithms/vcpo.py). What every step of a run shares is one
`UpdateSettings`; Table 5's diagnostics attach as one optional `RatioProbe`
(trainer/diagnostics/ratio_diagnostics.py), which reads the update forward and never changes the step.

The objective of one micro-batch: `L = agg(w ⊙ ℓ, m′) − β_H·agg(H, m′) + β·agg(KL(π_θ ‖ π_ref), m′)`
(reference §2.6; the KL term only with `algo.kl_coef` > 0 and not `kl_in_reward`, π_ref the frozen starting policy,
trainer/reference.py), driven by `AlgoConfig` fields only (presets fill them; nothing branches on a preset's name).
ℓ comes from the loss registry (trainer/objective/losses.py); w and m′ are the rollout batch's prepared
corrections (`prepare_corrections`, trainer/objective/corrections.py), never recomputed here: a batch without them
is refused. The mini-batch denominators are counted over m′ (`denominators`), so verl-semantics MIS rejections leave
them and micro-batching cannot change the loss. Dr.GRPO's seq-mean-token-sum-norm divides by a constant T_norm
(`agg_norm_len`), never by the batch's padded width. Flat loss hyperparameters are taken *by name* from
`AlgoConfig` (`loss_kwargs`): the registry's entries state no defaults, so the config is their one source.

With `distributed.mixed_precision=fp16` a grad scaler (`trainer/runtime/distributed.py` build_grad_scaler) makes it
verl's sequence: scale(loss).backward() per micro-batch → unscale → clip → step unless a gradient overflowed →
update the scale.

Legend: B trajectories in the rollout batch, b rows of a micro-batch, T response positions.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from agents.perturbation import LayerwisePerturbation, noise_seed
from trainer.algorithms.vcpo import ess_lr_scale, scaled_lr
from trainer.config.algo_config import AlgoConfig
from trainer.config.train_config import TrainConfig
from trainer.diagnostics.ratio_diagnostics import RatioProbe
from trainer.objective.logprobs import compute_logprobs, micro_batches
from trainer.objective.losses import (
    REQUIRED_AGG,
    aggregate,
    get_policy_loss,
    keyword_names,
    kl_penalty,
    masked_fill_zero,
    masked_mean,
)
from trainer.objective.offpolicy_masks import opsm_keep
from trainer.objective.types import Batch, EpisodeRows, episode_count, row_seq_tokens
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


def minibatch_rows(batch_size: int, num_minibatches: int, generator: torch.Generator,
                   episode_index: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Shuffle episodes once and split them into `num_minibatches` near-equal mini-batches of their rows: an episode's
    traces (`episode_index` (B,); None: one row each) stay in one mini-batch, so its sequence mean is whole."""
    episodes = EpisodeRows.of(episode_index, batch_size)
    perm = torch.randperm(episodes.count, generator=generator)
    chunks = [chunk for chunk in perm.tensor_split(num_minibatches) if len(chunk)]
    if episodes.one_row_each:
        return chunks
    rows_of = [(episodes.index == e).nonzero().squeeze(-1) for e in range(episodes.count)]
    return [torch.cat([rows_of[int(e)] for e in chunk]) for chunk in chunks]


@dataclass(frozen=True)
class UpdateSettings:
    """What every mini-batch step of a run shares; `from_config` reads it once from the run's config."""

    algo: AlgoConfig  # the objective (`micro_batch_objective`)
    temperature: float  # rollout.temperature: π_θ at the sampler's temperature, so its ratios to μ are meaningful
    micro_batch_size: int  # optim.micro_batch_size: rows per forward / backward (the loss cannot depend on it)
    grad_clip: float  # optim.grad_clip: max global grad norm
    norm_len: int | None = None  # T_norm of seq_mean_token_sum_norm: algo.loss_agg_norm_len or the response budget
    top_p: float = 1.0  # rollout.top_p / top_k: the sampler's truncation, replayed by every forward (defaults: none)
    top_k: int = 0
    # this rank: under data parallelism the denominators, the loss, ALP's log σ gradients and the grad norm are
    # global, so every rank takes the same step decision; the other metrics are this rank's (the loop averages them)
    ctx: DistContext = field(default_factory=lambda: SINGLE)

    @classmethod
    def from_config(cls, cfg: TrainConfig, ctx: DistContext = SINGLE) -> UpdateSettings:
        """The settings of `cfg` on rank `ctx`."""
        return cls(cfg.algo, temperature=cfg.rollout.temperature, micro_batch_size=cfg.optim.micro_batch_size,
                   grad_clip=cfg.optim.grad_clip,
                   norm_len=cfg.algo.loss_agg_norm_len or cfg.rollout.max_response_tokens,
                   top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k, ctx=ctx)


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
    local_tokens, local_seqs, seq_tokens = denominators(batch, rows)  # mini-batch denominators: micro-batching
    n_tokens, n_seqs = global_counts(settings.ctx, local_tokens, local_seqs)  # cannot change the loss, nor ranks
    sums: dict[str, float] = {}
    total_loss, real_tokens, padded_tokens = 0.0, 0, 0
    for i, micro in enumerate(micro_batches(rows, settings.micro_batch_size, batch)):
        sub = batch.select(micro)
        real_tokens += int(sub.attention_mask.sum())
        padded_tokens += sub.input_ids.numel()
        seed = noise_seed(noise_base + i, settings.ctx.rank)
        with perturbation.active(seed=seed) if perturbation else nullcontext():
            logp, entropy = compute_logprobs(model, sub, settings.temperature, with_entropy=True, top_p=settings.top_p,
                                             top_k=settings.top_k, entropy_grad=bool(settings.algo.entropy_coef))
            loss, metrics = micro_batch_objective(settings.algo, sub, logp, entropy, n_tokens=n_tokens, n_seqs=n_seqs,
                                                  norm_len=settings.norm_len, seq_tokens=seq_tokens[micro])
            (scaler.scale(loss) if scaler is not None else loss).backward()  # fp16: tiny gradients not flushed to 0
        if probe is not None:
            probe.observe(model, sub, logp, perturbation, seed, settings.temperature, top_p=settings.top_p,
                          top_k=settings.top_k)
        total_loss += loss.item()
        weight = sub.loss_mask.sum().item() / local_tokens.item()  # token-weighted average of micro metrics
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + weight * value
    lr_scale, lr_metrics = ess_lr_scale(settings.algo, batch, rows, settings.ctx.all_reduce_sum)  # VCPO; else None
    step, extra = optimizer_step(optimizer, total_loss, settings, perturbation, scaler, lr_scale)
    out = {f"actor/{k}": v for k, v in sums.items()} | lr_metrics
    out |= step | {"perf/real_token_frac": real_tokens / max(padded_tokens, 1)} | extra
    return out | (probe.report() if probe is not None else {})


def optimizer_step(optimizer: torch.optim.Optimizer, total_loss: float, settings: UpdateSettings,
                   perturbation: LayerwisePerturbation | None = None, scaler: ShardedGradScaler | None = None,
                   lr_scale: float | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """The step after the accumulated backward: ({loss/policy, actor/grad_norm, actor/grad_norm_nonfinite}, the
    perturbation's and the loss scale's metrics). `total_loss` is this rank's sum of micro-batch losses.

    Under data parallelism ALP's log σ gradients and the loss are summed over ranks first. With a `scaler`
    (mixed_precision=fp16) the gradients are divided by the loss scale before anything reads them; a step whose
    gradients overflowed is skipped (counted in `actor/grad_norm_nonfinite`, flagged in `actor/fp16_overflow`)
    and the scale halved. The logged loss and grad norm are the unscaled ones. A `lr_scale` (VCPO's ESS factor,
    `ess_lr_scale`) multiplies every param group's lr for this step only (`scaled_lr`; `actor/lr` is logged).
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
    with scaled_lr(optimizer, lr_scale) as lr_metrics:  # the configured lrs are back once the step is taken
        if skipped:
            optimizer.zero_grad(set_to_none=True)  # non-finite loss or gradient (an fp16 overflow): skip, count it
        elif scaler is not None:
            scaler.step(local_grads)  # the optimizer's step (the scaler found no inf either: the norm is finite)
        else:
            optimizer.step()
    extra |= lr_metrics
    if scaler is not None:
        extra |= _update_loss_scale(scaler)
    return {"loss/policy": total_loss, "actor/grad_norm": grad_norm, "actor/grad_norm_nonfinite": float(skipped)}, extra


def _update_loss_scale(scaler: ShardedGradScaler) -> dict[str, float]:
    """Halve the scale after an overflow, double it after its growth interval of clean steps; returns the scale
    this step's gradients were multiplied by and whether they overflowed (1.0: the step was skipped)."""
    used = scaler.get_scale()
    scaler.update()
    return {"actor/loss_scale": used, "actor/fp16_overflow": float(scaler.get_scale() < used)}


def loss_kwargs(algo: AlgoConfig, name: str | None = None) -> dict:
    """Flat hyperparameters for registry entry `name` (default `algo.policy_loss`), by field name."""
    fn = get_policy_loss(name or algo.policy_loss)
    names = [n for n in keyword_names(fn) if n != "weights"]
    missing = [n for n in names if not hasattr(algo, n)]
    if missing:
        raise ValueError(f"policy loss {name or algo.policy_loss!r} takes {missing}, which AlgoConfig lacks; "
                         "add the field(s) to AlgoConfig")
    return {n: getattr(algo, n) for n in names}


def prepared_corrections(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, m′) that `prepare_corrections` computed for the rollout batch, (B, T) each; a batch without them is an
    error (trainer/objective/corrections.py says why they are never computed per micro-batch)."""
    if batch.corr_weights is None or batch.corr_keep is None:
        raise ValueError("the batch has no corr_weights / corr_keep: call prepare_corrections(algo, batch) once per "
                         "rollout batch, after the old log-probs, and store them on the batch before the update "
                         "(trainer/loop.py prepare_batch does)")
    return batch.corr_weights, batch.corr_keep


def denominators(batch: Batch, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N_tok, B′, seq_tokens) of the mini-batch `rows` over m′: valid tokens, non-empty sequences, a sequence being
    an episode (its rows the traces of one, trainer/objective/types.py), and (B,) each row's episode's tokens, the
    denominator of its share of a sequence mean (mini-batches hold whole episodes, `minibatch_rows`) (reference
    §2.3)."""
    keep = prepared_corrections(batch)[1]  # (B, T) m′
    mask = keep[rows]  # (b, T)
    index = None if batch.episode_index is None else batch.episode_index[rows]
    seq_tokens = row_seq_tokens(keep, EpisodeRows.of(batch.episode_index, len(batch)))  # (B,)
    return mask.sum().clamp(min=1.0), episode_count(mask, EpisodeRows.of(index, len(rows))).clamp(min=1).float(), \
        seq_tokens


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
                          n_tokens: torch.Tensor, n_seqs: torch.Tensor, norm_len: int | None = None,
                          seq_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of one micro-batch (its share of the mini-batch loss) and its metrics.

    logp, entropy: (b, T) from the update forward (perturbed for ALP); `sub` carries old_logp,
    rollout_logp, advantages, loss_mask and the prepared corr_weights / corr_keep (b, T). Without a correction w
    is 1 on m′ (an exact no-op), except that a paper-semantics veto zeroes its rows through w.
    `n_tokens` / `n_seqs` are the mini-batch denominators over m′ (`denominators`). `norm_len` is
    seq-mean-token-sum-norm's T_norm (`agg_norm_len`: falls back to `algo.loss_agg_norm_len`). `seq_tokens` (b,):
    each row's episode's tokens of m′ (`row_seq_tokens`; None: each row its own sequence).
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
    agg = {"n_tokens": n_tokens, "n_seqs": n_seqs, "norm_len": t_norm, "seq_tokens": seq_tokens}  # denominators
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
