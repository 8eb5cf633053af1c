"""One rollout batch → several optimizer steps (mini-batches, each accumulated over micro-batches).

Stages used by the loop: `old_logprobs` (no grad, unperturbed) and `update_policy` (loss → backward →
global grad clip → non-finite guard → optimizer step). What is optimized lives in `objective.py`;
this module never branches on algorithm names.

Legend: B trajectories in the rollout batch, T response positions.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import nn

from agents.perturbation import LayerwisePerturbation, noise_seed
from trainer.config import AlgoConfig
from trainer.logprobs import compute_logprobs
from trainer.objective import denominators, micro_batch_objective
from trainer.types import Batch


@torch.no_grad()
def old_logprobs(model: nn.Module, batch: Batch, temperature: float, micro_batch_size: int) -> torch.Tensor:
    """Trainer log-probs at θ_old for the whole batch, (B, T); same micro-batch composition as updates."""
    was_training = model.training
    model.eval()
    out = torch.zeros_like(batch.rollout_logp)
    for rows in _chunks(torch.arange(len(batch)), micro_batch_size, batch):
        sub = batch.select(rows)
        logp, _ = compute_logprobs(model, sub, temperature)
        out[rows, : logp.shape[1]] = logp
    model.train(was_training)
    return out


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
                  norm_len: int | None = None) -> dict[str, float]:
    """One optimizer step on the mini-batch `rows`; returns its metrics (`actor/*`, `loss/*`, `perturb/*`).

    With a `perturbation` (ALP), the update forward AND its backward run inside `perturbation.active`,
    seeded per micro-batch (`noise_base + i`) so recomputation sees the same noise.
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    n_tokens, n_seqs = denominators(batch, rows)  # mini-batch denominators: micro-batching cannot change the loss
    sums: dict[str, float] = {}
    total_loss = 0.0
    real_tokens = padded_tokens = 0
    for i, micro in enumerate(_chunks(rows, micro_batch_size, batch)):
        sub = batch.select(micro)
        real_tokens += int(sub.attention_mask.sum())
        padded_tokens += sub.input_ids.numel()
        noise = perturbation.active(seed=noise_seed(noise_base + i)) if perturbation else nullcontext()
        with noise:
            logp, entropy = compute_logprobs(model, sub, temperature, with_entropy=True)
            loss, metrics = micro_batch_objective(algo, sub, logp, entropy, n_tokens=n_tokens, n_seqs=n_seqs,
                                                  norm_len=norm_len)
            loss.backward()
        total_loss += loss.item()
        weight = sub.loss_mask.sum().item() / n_tokens.item()  # token-weighted average of micro metrics
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + weight * value
    extra = perturbation.metrics() if perturbation else {}  # before the step: log σ gradient norm
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip).item()
    skipped = not (math.isfinite(grad_norm) and math.isfinite(total_loss))
    if skipped:
        optimizer.zero_grad(set_to_none=True)  # non-finite loss or gradient: skip the step, count it
    else:
        optimizer.step()
    out = {f"actor/{k}": v for k, v in sums.items()}
    out.update({"loss/policy": total_loss, "actor/grad_norm": grad_norm,
                "actor/grad_norm_nonfinite": float(skipped),
                "perf/real_token_frac": real_tokens / max(padded_tokens, 1)})
    out.update(extra)
    return out
