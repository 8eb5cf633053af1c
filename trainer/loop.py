"""The RL loop, top to bottom. One iteration:

    rollout (engine + envs → Trajectory) → Batch (collate, void-turn masking) → advantages (GRPO groups)
    → old log-probs (trainer, no grad) → for each mini-batch: loss → step → sync weights to the engine
    → metrics → checkpoint

Each stage is one named function; the loop only calls them in order. Components (model, engine, envs,
agent) are built by `trainer/components.py`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from agents.rollout import run_episodes
from agents.trajectory import Trajectory
from evaluation.evaluate import evaluation_records, summarize
from trainer.advantages import broadcast_advantages, group_advantages
from trainer.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint
from trainer.components import Components, build_components, episode_specs, rollout_limits
from trainer.config import TrainConfig, to_dict
from trainer.logger import MetricLogger
from trainer.metrics import mean_of, rollout_metrics
from trainer.mismatch_metrics import mismatch_diagnostics
from trainer.objective import prepare_corrections
from trainer.progress import progress_bar
from trainer.types import Batch, collate
from trainer.update import minibatch_rows, old_logprobs, update_policy


@dataclass
class StepResult:
    step: int
    metrics: dict[str, float]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def step_seed(cfg: TrainConfig, step: int) -> int:
    """All randomness of step k derives from (seed, k), so a resumed run replays step k+1 exactly."""
    return cfg.seed * 100_003 + step


def collect_rollouts(c: Components, cfg: TrainConfig, step: int) -> list[Trajectory]:
    specs = episode_specs(cfg, "train", step, cfg.rollout.prompts_per_step, cfg.rollout.group_size)
    limits = rollout_limits(cfg)
    return run_episodes(c.engine, c.agent, c.envs, specs, limits, seed=step_seed(cfg, step), pool=c.pool)


def make_batch(c: Components, cfg: TrainConfig, trajs: list[Trajectory]) -> Batch:
    batch = collate(trajs, c.tokenizer.pad_token_id)
    if cfg.env.mask_void_turns:  # SimpleTIR: a trajectory ending in a void turn teaches nothing
        void = torch.tensor([bool(t.info.get("void_turn")) for t in trajs])
        batch.loss_mask[void] = 0.0
    return batch


def compute_advantages(batch: Batch, cfg: TrainConfig) -> dict[str, float]:
    adv, metrics = group_advantages(batch.rewards, batch.group_ids, norm_by_std=cfg.algo.adv_norm_by_std,
                                    leave_one_out=cfg.algo.adv_leave_one_out)
    batch.advantages = broadcast_advantages(adv, batch.loss_mask)  # (B, T)
    return metrics


def update(c: Components, cfg: TrainConfig, batch: Batch, step: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(step_seed(cfg, step))
    records = [update_policy(c.model, c.optimizer, batch, rows, algo=cfg.algo,
                             temperature=cfg.rollout.temperature, micro_batch_size=cfg.optim.micro_batch_size,
                             grad_clip=cfg.optim.grad_clip, perturbation=c.perturbation,
                             noise_base=(step * cfg.optim.num_minibatches + k) * 1000)
               for k, rows in enumerate(minibatch_rows(len(batch), cfg.optim.num_minibatches, gen))]
    metrics = mean_of(records)
    metrics["actor/grad_norm_nonfinite"] = sum(r["actor/grad_norm_nonfinite"] for r in records)
    metrics["loss/first_minibatch"] = records[0]["loss/policy"]
    return metrics


def train_step(c: Components, cfg: TrainConfig, step: int) -> StepResult:
    trajs = collect_rollouts(c, cfg, step)
    batch = make_batch(c, cfg, trajs)
    metrics = rollout_metrics(trajs) | compute_advantages(batch, cfg)
    batch.old_logp = old_logprobs(c.model, batch, cfg.rollout.temperature, cfg.optim.micro_batch_size)
    metrics |= prepare_corrections(cfg.algo, batch)
    metrics |= c.hooks.before_update(c, cfg, batch, step)  # QUATRO duals, SPrPO allocation (config-driven)
    metrics |= mismatch_diagnostics(batch.old_logp, batch.rollout_logp, batch.loss_mask, batch.rewards, step=step)
    # MIPU may reject the candidate update and roll weights, optimizer and engine back (config-driven).
    metrics |= c.hooks.update_and_sync(c, cfg, step, lambda: update(c, cfg, batch, step))
    return StepResult(step, metrics)


def evaluate(c: Components, cfg: TrainConfig, step: int) -> dict[str, float]:
    """Held-out (test split) evaluation; per-episode records go to `<run>/eval/step_<k>.jsonl`."""
    limits = rollout_limits(cfg)
    records = evaluation_records(c.engine, c.agent, c.envs, "test", cfg.eval_tasks, limits,
                                 samples_per_task=cfg.eval_samples, greedy=cfg.eval_greedy, seed=cfg.seed,
                                 pool=c.pool)
    out = Path(cfg.output_dir) / "eval"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"step_{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return summarize(records, "eval")


def train(cfg: TrainConfig, *, resume: bool = False, show_progress: bool = True,
          evaluate_at_start: bool = False) -> list[StepResult]:
    """Run `cfg.steps` RL iterations (continuing from the latest checkpoint with `resume`).

    With `eval_tasks > 0`, held-out evaluation runs every `eval_every` steps and after the last step,
    and with `evaluate_at_start` (or `cfg.eval_at_start`) also before any update (logged as the step-0 record).
    """
    run_dir = Path(cfg.output_dir)
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {run_dir / 'checkpoints'}; run without --resume")
    seed_everything(cfg.seed)
    c = build_components(cfg, init_from=str(ckpt) if ckpt else None)
    start = c.load_extra_state(load_trainer_state(ckpt, c.optimizer)) if ckpt else 0
    logger = MetricLogger(run_dir, resume_step=start if ckpt else None, use_wandb=cfg.wandb, config=to_dict(cfg))
    results = []
    try:
        if cfg.eval_tasks and (evaluate_at_start or cfg.eval_at_start) and start == 0:
            logger.log(0, evaluate(c, cfg, 0))
        with progress_bar("RL", total=cfg.steps, completed=start, enabled=show_progress) as bar:
            for step in range(start + 1, cfg.steps + 1):
                result = train_step(c, cfg, step)
                if cfg.eval_tasks and ((cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps):
                    result.metrics |= evaluate(c, cfg, step)
                logger.log(step, result.metrics)
                results.append(result)
                if step % cfg.save_every == 0 or step == cfg.steps:
                    save_checkpoint(run_dir, step, c.model, c.tokenizer, c.optimizer, extra=c.extra_state())
                bar.advance(reward=result.metrics["rollout/reward"], loss=result.metrics["loss/policy"])
    finally:
        logger.close()
        c.close()
    return results
