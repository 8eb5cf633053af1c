"""MIPU — Monotonic Inference Policy Update: accept/rollback screening (arXiv 2606.29526; reference §3.6).

J(μ_{k+1}) − J(μ_k) = [J(μ_{k+1}) − J(π_{k+1})] + [J(π_{k+1}) − J(μ_k)]: step 1 (the candidate update)
optimizes the second bracket, step 2 (this module) screens the first, the gap between the deployed
(inference) policy μ and the trainer policy π after the update. No formal guarantee.

- **Step 1** is a preset, not code: `ppo_clip` (dual clip on the token update ratio r only) times the
  token-level truncated mismatch weight w̄ = min(exp⟦Δ_mis⟧, 2) (`correction: tis`, `corr_level: token`,
  `corr_upper: 2`), seq-mean-token-mean (configs/algorithms/mipu.yaml).
- **Step 2** (`MipuScreen.screened_update`): snapshot (θ_k, optimizer moments, perturbation state) on the
  CPU → run the update stage → sync θ_{k+1} to the engine (μ_{k+1}) → sample fresh validation groups from
  it → reward, group advantages Â → one no-grad unperturbed trainer forward for log π_{k+1} →
  ρ_i = exp⟦(1/n_i) Σ_t m (log π_{k+1} − log μ_{k+1})⟧, T̂ = −mean_i(ρ_i Â_i) → accept iff T̂ ≥ −c(k),
  c(k) = c_0 + (c_1 − c_0)·min(k/K, 1). On rejection: restore θ_k, the optimizer state (moments and step
  counts) and the perturbation, re-sync the engine; the batch is discarded.

Choices where the paper is silent, [R] (settings in `AlgoConfig.mipu_*`): validation prompts are drawn
from the *training* split, never the test split, excluding this step's training prompts, resampled every
step (`mipu_val_prompts`, default = prompts_per_step); every validation trajectory counts (void-turn
trajectories are samples of μ too; rows without sampled tokens are left out of the mean); Â follows
`adv_norm_by_std` / `adv_leave_one_out`; all-degenerate validation gives T̂ = 0 (accepted when c ≥ 0);
k = step − 1 (iterations before this one, accepted or not); optimizer moments are restored too. There
is no LR scheduler in alprl; `take_snapshot` / `restore_snapshot` accept one (`state_dict` protocol).
Departure: the paper's KL-to-reference term (β = 1e-3) is not applied: the TIR loop has no reference model.

Legend: B validation trajectories, T response positions.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from agents.rollout import EpisodeSpec, run_episodes
from trainer.advantages import group_advantages
from trainer.config import AlgoConfig, TrainConfig
from trainer.losses import LOG_RATIO_CLAMP
from trainer.types import collate
from trainer.update import old_logprobs

if TYPE_CHECKING:
    from trainer.components import Components


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


def validation_specs(cfg: TrainConfig, step: int) -> list[EpisodeSpec]:
    """Fresh validation groups for step `step`: train-split tasks not in this step's training batch."""
    from trainer.components import TRAIN_INDICES, episode_specs  # here: components imports this package

    n_prompts = cfg.algo.mipu_val_prompts or cfg.rollout.prompts_per_step
    if n_prompts < 1 or cfg.rollout.group_size < 2:
        raise ValueError(f"MIPU validation needs algo.mipu_val_prompts ≥ 0 and rollout.group_size ≥ 2, got "
                         f"{cfg.algo.mipu_val_prompts} and {cfg.rollout.group_size}")
    training = {s.options["index"] for s in episode_specs(cfg, "train", step, cfg.rollout.prompts_per_step, 1)}
    rng = random.Random(f"mipu-validation/{cfg.seed}/{step}")
    picked: list[int] = []
    while len(picked) < n_prompts:
        index = rng.choice(TRAIN_INDICES)
        if index not in training and index not in picked:
            picked.append(index)
    return [EpisodeSpec(seed=index, options={"split": "train", "index": index}, group_id=g)
            for g, index in enumerate(picked) for _ in range(cfg.rollout.group_size)]


def validation_gap(c: Components, cfg: TrainConfig, step: int) -> tuple[float, dict[str, float]]:
    """Sample validation groups from the (already synced) engine and return T̂ with `mipu/val_*` metrics."""
    # here, not at the top: trainer.components imports this package, so a top-level import would cycle
    from trainer.components import rollout_limits

    specs = validation_specs(cfg, step)
    limits = rollout_limits(cfg)
    seed = random.Random(f"mipu-sampling/{cfg.seed}/{step}").randrange(2**31)
    trajs = []
    for start in range(0, len(specs), len(c.envs)):  # no more episodes at once than there are envs
        trajs += run_episodes(c.engine, c.agent, c.envs, specs[start: start + len(c.envs)], limits,
                              seed=seed + start, pool=c.pool)
    batch = collate(trajs, c.tokenizer.pad_token_id)
    algo = cfg.algo
    adv, adv_metrics = group_advantages(batch.rewards, batch.group_ids, norm_by_std=algo.adv_norm_by_std,
                                        leave_one_out=algo.adv_leave_one_out)
    new_logp = old_logprobs(c.model, batch, cfg.rollout.temperature, cfg.optim.micro_batch_size)
    t_post, stats = gap_proxy(new_logp, batch.rollout_logp, batch.loss_mask, adv)
    stats |= {"mipu/val_degenerate_frac": adv_metrics["adv/degenerate_group_frac"],
              "mipu/val_reward": batch.rewards.mean().item()}
    return t_post, stats


def sync_engine(c: Components) -> None:
    """Push the trainer's weights to the inference engine (the loop's sync stage)."""
    c.engine.update_weights(c.model.named_parameters())


@dataclass
class MipuScreen:
    """Per-run MIPU state: the rejection history behind `mipu/rollback_rate` (a moving average)."""

    history: deque = field(default_factory=lambda: deque(maxlen=100))

    def screened_update(self, c: Components, cfg: TrainConfig, step: int,
                        run_update: Callable[[], dict[str, float]]) -> dict[str, float]:
        """Run the update stage and sync the engine; with `algo.mipu_screen`, as a screened candidate.

        `run_update()` performs the mini-batch optimizer steps of this rollout batch and returns their
        metrics (the loop's `update` stage). Returns them plus `mipu/*` when screening.
        """
        algo: AlgoConfig = cfg.algo
        if not algo.mipu_screen:
            metrics = run_update()
            sync_engine(c)
            return metrics
        if self.history.maxlen != algo.mipu_rollback_window:
            self.history = deque(self.history, maxlen=max(algo.mipu_rollback_window, 1))
        extra = [c.perturbation] if c.perturbation is not None else []
        snap = take_snapshot(c.model, c.optimizer, extra)
        metrics = run_update()
        sync_engine(c)  # μ_{k+1}: validation is sampled from the candidate
        t_post, val_metrics = validation_gap(c, cfg, step)
        threshold = acceptance_threshold(step - 1, algo.mipu_threshold_start, algo.mipu_threshold_end,
                                         algo.mipu_anneal_steps)
        accepted = t_post >= -threshold
        if not accepted:  # roll back θ, optimizer moments, perturbation, and the engine
            restore_snapshot(snap, c.model, c.optimizer, extra)
            sync_engine(c)
        self.history.append(0.0 if accepted else 1.0)
        metrics |= val_metrics
        metrics |= {"mipu/t_post": t_post, "mipu/threshold": threshold, "mipu/accepted": float(accepted),
                    "mipu/rollback_rate": sum(self.history) / len(self.history)}
        return metrics

    def state_dict(self) -> dict:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.history = deque(state.get("history", []), maxlen=self.history.maxlen)
