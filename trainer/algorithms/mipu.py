"""MIPU — Monotonic Inference Policy Update: accept/rollback screening (arXiv 2606.29526; reference §3.6).

J(μ_{k+1}) − J(μ_k) = [J(μ_{k+1}) − J(π_{k+1})] + [J(π_{k+1}) − J(μ_k)]: step 1 (the candidate update)
optimizes the second bracket, step 2 (this module) screens the first, the gap between the deployed
(inference) policy μ and the trainer policy π after the update. No formal guarantee.

- **Step 1** is a preset, not code: `ppo_clip` (dual clip on the token update ratio r only) times the
  token-level truncated mismatch weight w̄ = min(exp⟦Δ_mis⟧, 2) (`correction: tis`, `corr_level: token`,
  `corr_upper: 2`), seq-mean-token-mean (configs/algorithms/mipu.yaml).
- **Step 2** (`learn`'s MIPU branch, `mipu_screening` in trainer/loop.py): `take_snapshot` of (θ_k, optimizer
  moments, perturbation state) on the CPU → the update stage → sync θ_{k+1} to the engine (μ_{k+1}) → sample
  fresh validation groups from it (`validation_rollouts`) → the update batch's own preparation (`prepare_batch`
  with `for_update=False`: rewards, group advantages Â, one no-grad unperturbed trainer forward for log π_{k+1})
  → `validation_gap`: ρ_i = exp⟦(1/n_i) Σ_t m (log π_{k+1} − log μ_{k+1})⟧, T̂ = −mean_i(ρ_i Â_i) →
  `screen_candidate`: accept iff T̂ ≥ −c(k), c(k) = c_0 + (c_1 − c_0)·min(k/K, 1). On rejection: restore θ_k,
  the optimizer state (moments and step counts) and the perturbation, re-sync the engine; the batch is discarded.

Choices where the paper is silent, [R] (settings in `AlgoConfig.mipu_*`): validation prompts are drawn
from the *training* split, never the test split, excluding this step's training prompts, resampled every
step (`mipu_val_prompts`, default = prompts_per_step); every validation trajectory counts (void-turn
trajectories are samples of μ too; rows without sampled tokens are left out of the mean); Â follows
`adv_norm_by_std` / `adv_leave_one_out`; all-degenerate validation gives T̂ = 0 (accepted when c ≥ 0);
k = step − 1 (iterations before this one, accepted or not); optimizer moments are restored too. There
is no LR scheduler in alprl; `take_snapshot` / `restore_snapshot` accept one (`state_dict` protocol).
KL to the reference (the paper's β = 1e-3): the preset sets `algo.kl_coef`, the loss term against the frozen starting
policy (`trainer/reference.py`); the screening itself does not use it.

Legend: B validation trajectories, T response positions.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from agents.rollout import run_episodes
from agents.trajectory import Trajectory
from envs.splits import derive_seed
from trainer.components import Components
from trainer.config.train_config import TrainConfig
from trainer.objective.losses import LOG_RATIO_CLAMP
from trainer.objective.types import Batch
from trainer.runtime.distributed import DistContext, rank_share
from trainer.tasks import rollout_limits, validation_specs


def _to_cpu(obj: Any) -> Any:
    """Deep copy of a (nested) state dict with every tensor cloned to the CPU."""
    if isinstance(obj, Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


@dataclass
class Snapshot:
    """CPU copies taken before a candidate update: model, optimizer, extra modules, optional scheduler."""

    model: dict[str, Tensor]
    optimizer: dict
    extra: list[dict] = field(default_factory=list)
    scheduler: dict | None = None


def take_snapshot(model: nn.Module, optimizer: torch.optim.Optimizer, extra: Iterable[nn.Module] = (),
                  scheduler: Any = None) -> Snapshot:
    """Copy θ (parameters and buffers), the optimizer state (Adam moments, step counts, param groups), the
    state of `extra` modules (e.g. the ALP perturbation) and an LR scheduler's state, all to the CPU."""
    return Snapshot(model=_to_cpu(model.state_dict()), optimizer=_to_cpu(optimizer.state_dict()),
                    extra=[_to_cpu(m.state_dict()) for m in extra],
                    scheduler=_to_cpu(scheduler.state_dict()) if scheduler is not None else None)


def restore_snapshot(snap: Snapshot, model: nn.Module, optimizer: torch.optim.Optimizer,
                     extra: Iterable[nn.Module] = (), scheduler: Any = None) -> None:
    """Put everything `take_snapshot` copied back in place (parameters keep their identity, so the
    optimizer still points at them). The snapshot is copied again, so it can be restored twice."""
    model.load_state_dict(snap.model)  # copies into the existing tensors
    optimizer.load_state_dict(_to_cpu(snap.optimizer))  # casts state to each parameter's device
    extra = list(extra)
    if len(extra) != len(snap.extra):
        raise ValueError(f"restore_snapshot: {len(extra)} extra modules, the snapshot holds {len(snap.extra)}")
    for module, state in zip(extra, snap.extra, strict=True):
        module.load_state_dict(state)
    if scheduler is not None:
        if snap.scheduler is None:
            raise ValueError("restore_snapshot: a scheduler was given but none was snapshotted")
        scheduler.load_state_dict(snap.scheduler)


def acceptance_threshold(k: int, start: float, end: float, anneal_steps: int) -> float:
    """c(k) = c_0 + (c_1 − c_0)·min(k/K, 1): linear annealing over the first K iterations."""
    frac = 1.0 if anneal_steps <= 0 else min(max(k, 0) / anneal_steps, 1.0)
    return start + (end - start) * frac


def accepts(t_post: float, threshold: float) -> bool:
    """MIPU step 2: keep the candidate iff T̂ ≥ −c(k) (arXiv 2606.29526; reference §3.6).

    Sign: with group-centred Â, mean_i(ρ_i Â_i) over samples of μ estimates E_π[Â] while E_μ[Â] ≈ 0, so
    T̂ ≈ E_μ[Â] − E_π[Â] (the J(μ_{k+1}) − J(π_{k+1}) bracket): T̂ > 0 when the deployed μ_{k+1} puts more
    weight on positive-advantage responses than the trainer π_{k+1}; a candidate is rejected only when
    the deployed policy trails the trainer's by more than c.
    """
    return t_post >= -threshold


@torch.no_grad()
def gap_proxy(new_logp: Tensor, rollout_logp: Tensor, mask: Tensor, adv: Tensor) -> tuple[float, dict[str, float]]:
    """T̂ = −mean_i(ρ_i Â_i), ρ_i = exp⟦(1/n_i) Σ_t m (log π_{k+1} − log μ_{k+1})⟧ (length-normalized).

    new_logp (trainer at θ_{k+1}), rollout_logp (engine μ_{k+1}), mask: (B, T); adv: (B,) Â. Tokens with a
    non-finite log-prob leave the mask; rows without a sampled token leave the mean. Returns T̂ and stats.
    """
    if not (new_logp.shape == rollout_logp.shape == mask.shape) or adv.shape != mask.shape[:1]:
        raise ValueError(f"gap_proxy: shapes new {tuple(new_logp.shape)}, rollout {tuple(rollout_logp.shape)}, "
                         f"mask {tuple(mask.shape)} must agree and adv {tuple(adv.shape)} must be (B,)")
    m = ((mask > 0) & torch.isfinite(new_logp) & torch.isfinite(rollout_logp)).to(torch.float64)
    delta = torch.where(m > 0, new_logp.double() - rollout_logp.double(), torch.zeros_like(m))  # (B, T)
    n = m.sum(-1)  # (B,)
    rows = n > 0
    if not rows.any():
        return 0.0, {"mipu/val_rho_mean": 1.0, "mipu/val_rows": 0.0}
    log_rho = (delta.sum(-1)[rows] / n[rows]).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    rho = log_rho.exp()  # (B',)
    t_post = -(rho * adv[rows].double()).mean().item()
    return t_post, {"mipu/val_rho_mean": rho.mean().item(), "mipu/val_log_rho_abs_max": log_rho.abs().max().item(),
                    "mipu/val_rows": float(rows.sum())}


def validation_rollouts(c: Components, cfg: TrainConfig, step: int) -> list[Trajectory]:
    """This rank's fresh validation episodes, sampled from the (already synced) engine, μ_{k+1}."""
    specs, first = rank_share(validation_specs(cfg, step), c.dist)  # data parallel: this rank's groups
    limits = dataclasses.replace(rollout_limits(cfg), mask_void_turns=False)  # every sample of μ counts
    trajs = []
    for start in range(0, len(specs), len(c.envs)):  # no more episodes at once than there are envs
        trajs += run_episodes(c.engine, c.agent, c.envs, specs[start: start + len(c.envs)], limits,
                              seed=derive_seed("mipu-validation-sampling", cfg.seed, step, first + start),
                              pool=c.pool)
    return trajs


def episode_advantages(batch: Batch) -> Tensor:
    """Â (B,) back from the prepared advantages A_bt = Â_b·m_bt (B, T): the value at a row's first sampled token,
    exact since m is 0/1; 0 on a row without one, which `gap_proxy` leaves out anyway."""
    first = batch.loss_mask.argmax(-1, keepdim=True)  # (B, 1): the first maximum, a sampled token if any
    sampled = batch.loss_mask.gather(1, first) > 0  # (B, 1)
    return torch.where(sampled, batch.advantages.gather(1, first), 0.0).squeeze(1)


def validation_gap(batch: Batch, batch_metrics: dict[str, float],
                   dist: DistContext) -> tuple[float, dict[str, float]]:
    """T̂ with `mipu/val_*` metrics from the validation batch that `prepare_batch(..., for_update=False)`
    (trainer/loop.py) made after the update: its old_logp is log π_{k+1}, its rollout_logp log μ_{k+1}."""
    t_post, stats = gap_proxy(batch.old_logp, batch.rollout_logp, batch.loss_mask, episode_advantages(batch))
    if dist.enabled:  # T̂ over every rank's rows: one accept/reject decision for all
        total = dist.all_reduce_sum(torch.tensor([t_post * stats["mipu/val_rows"], stats["mipu/val_rows"]],
                                                 dtype=torch.float64))
        t_post = float(total[0] / total[1]) if total[1] > 0 else 0.0
    stats |= {"mipu/val_degenerate_frac": batch_metrics["adv/degenerate_group_frac"],
              "mipu/val_reward": batch.rewards.mean().item()}
    return t_post, stats


@dataclass
class MipuHistory:
    """Per-run MIPU state: the rejection history behind `mipu/rollback_rate` (a moving average)."""

    history: deque = field(default_factory=lambda: deque(maxlen=100))

    def record(self, accepted: bool, window: int) -> float:
        """Append one screening outcome; returns the rollback rate over the last `window` of them."""
        if self.history.maxlen != max(window, 1):
            self.history = deque(self.history, maxlen=max(window, 1))
        self.history.append(0.0 if accepted else 1.0)
        return sum(self.history) / len(self.history)

    def state_dict(self) -> dict:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.history = deque(state.get("history", []), maxlen=self.history.maxlen)


def candidate_snapshot(c: Components) -> Snapshot:
    """θ_k, its optimizer state and the perturbation, before the candidate update."""
    return take_snapshot(c.model, c.optimizer, c.extra_modules())


def screen_candidate(c: Components, cfg: TrainConfig, history: MipuHistory, snapshot: Snapshot, step: int,
                     t_post: float) -> dict[str, float]:
    """Keep the candidate θ_{k+1} (already updated and synced to the engine) iff its T̂ (`validation_gap`) ≥ −c(k);
    else restore `snapshot` (weights, optimizer moments, perturbation) and re-sync the engine. Returns `mipu/*`
    metrics."""
    algo = cfg.algo
    threshold = acceptance_threshold(step - 1, algo.mipu_threshold_start, algo.mipu_threshold_end,
                                     algo.mipu_anneal_steps)
    accepted = accepts(t_post, threshold)
    if not accepted:  # roll back θ, optimizer moments, perturbation, and the engine
        restore_snapshot(snapshot, c.model, c.optimizer, c.extra_modules())
        c.sync_engine()
    rate = history.record(accepted, algo.mipu_rollback_window)
    return {"mipu/t_post": t_post, "mipu/threshold": threshold, "mipu/accepted": float(accepted),
            "mipu/rollback_rate": rate}
