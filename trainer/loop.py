"""The RL loop, top to bottom. `train_step` is one iteration: the rollout, then `learn`, which is the list of the
remaining stages, each a named call, in order:

    rollout (`collect_step`) → `rollout_metrics` → `settle_infra_failures` → `overlong_shaping` → batch
    (`prepare_batch`: old log-probs → advantages → corrections → (QUATRO duals)) → `sprpo_allocation` →
    `mismatch_report` → `update` (mini-batch
    steps, each `update_policy` in trainer/update.py, Table 5's `RatioProbe` on the first and last) → engine sync
    (the sampler's view: trainer/runtime/sampler_mismatch.py), with MIPU's screening as one explicit branch around update
    + sync (`candidate_snapshot`, then `mipu_screening`: validation rollouts → the same `prepare_batch` → gap proxy
    → keep or roll back)

With `rollout.async_rollouts` the rollout stage takes the batch a background producer sampled ahead, and the
engine sync is the producer's (trainer/runtime/async_rollouts.py: the schedule, the staleness bound, resume).

Stages return what they compute; `prepare_batch` alone assigns it to the batch, for the update and for MIPU's
validation batch alike (the rollout, and DAPO's overlong filter and `settle_infra_failures` through the same
`Trajectory.mask_out`, alone write its loss mask). Who counts in a group's advantage statistics is
`advantage_members` (trainer/objective/infra_failures.py), asked by every stage that forms groups. Components
(model, engine, envs, agent) come from `trainer/components.py`, task selection from `trainer/tasks.py`,
per-algorithm state (`AlgorithmState`) is saved with every checkpoint.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from agents.endpoint.harness import HarnessSource, load_harness
from agents.endpoint.service import EndpointSettings
from agents.engines.weight_check import WeightSyncError
from agents.rollout import run_episodes
from agents.trajectory import Trajectory
from envs.splits import derive_seed
from evaluation.evaluate import evaluation_records, summarize
from trainer.algorithms import AlgorithmState
from trainer.algorithms.dapo import collect_dynamic, overlong_shaping
from trainer.algorithms.mipu import (
    MipuHistory,
    Snapshot,
    candidate_snapshot,
    screen_candidate,
    validation_gap,
    validation_rollouts,
)
from trainer.algorithms.quatro import quatro_targets
from trainer.algorithms.staleness import mask_stale_tokens, staleness_metrics
from trainer.algorithms.vcpo import sequence_log_weights
from trainer.components import Components, build_components, make_envs
from trainer.config.train_config import TrainConfig, to_dict
from trainer.diagnostics.degenerate import DegenerateRun, DegenerateWatch
from trainer.diagnostics.drift_alarm import DriftAlarm
from trainer.diagnostics.episode_table import EPISODE_COLUMNS, episode_table
from trainer.diagnostics.full_vocab_kl import FullVocabKL
from trainer.diagnostics.mismatch_metrics import mismatch_diagnostics
from trainer.diagnostics.policy_drift import policy_drift
from trainer.diagnostics.ratio_diagnostics import RatioProbe, diag_suffixes
from trainer.diagnostics.rollout_metrics import mean_of, rollout_metrics
from trainer.diagnostics.scatter import is_periodic_step, save_scatter
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.corrections import prepare_corrections
from trainer.objective.gigpo import gigpo_token_advantages
from trainer.objective.infra_failures import advantage_members, resampling, settle_infra_failures
from trainer.objective.logprobs import old_logprobs
from trainer.objective.truncation import TruncationProbe
from trainer.objective.types import Batch, EpisodeRows, collate
from trainer.reference import kl_reward_penalty, reference_logprobs
from trainer.runtime.async_rollouts import AsyncRollouts, start_async
from trainer.runtime.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint
from trainer.runtime.distributed import DistContext, close_distributed, init_distributed, rank_share
from trainer.runtime.logger import MetricLogger, require_logger_packages
from trainer.runtime.outage import InfraOutage, OutageWatch
from trainer.runtime.progress import progress_bar
from trainer.runtime.run_meta import start_run_meta
from trainer.setup.saved_config import eval_settings
from trainer.tasks import episode_specs, rollout_limits
from trainer.update import UpdateSettings, minibatch_rows, update_policy


@dataclass
class StepResult:
    step: int
    metrics: dict[str, float]
    trajectories: list[Trajectory] = field(default_factory=list)
    """This rank's rollout batch of the step, for the logger's episode table; `_train` lets go of it once logged."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def collect_rollouts(c: Components, cfg: TrainConfig, step: int) -> list[Trajectory]:
    """All randomness of step k derives from (seed, k), so a resumed run replays step k+1 exactly."""
    return collect_step(c, cfg, step)[0]


def collect_step(c: Components, cfg: TrainConfig, step: int) -> tuple[list[Trajectory], dict[str, float]]:
    """This rank's rollouts of the step and their sampling metrics; with `algo.dynamic_sampling` zero-variance
    groups are dropped and refilled (trainer/algorithms/dapo.py), with `rollout.infra_failures=resample` episodes
    the infrastructure failed are played again first (trainer/objective/infra_failures.py). Each episode samples
    with the seeds it has in the whole step's batch, so N ranks play the episodes one process would. With
    `rollout.source=harness` the user's harness plays them through the policy endpoint instead of the native agent
    loop, and an episode whose harness rewrote its history holds a trace per break (`rollout/prefix_breaks`)."""
    every = episode_specs(cfg, "train", step, cfg.rollout.prompts_per_step, cfg.rollout.group_size)
    specs, first = rank_share(every, c.dist)
    limits = rollout_limits(cfg)
    harness = harness_source(c, cfg, first) if cfg.rollout.source == "harness" else None

    def run(batch_specs: list, seed: int) -> list[Trajectory]:
        if harness is not None:
            return harness.run(batch_specs, seed)
        return run_episodes(c.engine, c.agent, c.envs, batch_specs, limits, seed=seed, pool=c.pool,
                            first_index=first)

    if cfg.rollout.infra_failures == "resample":
        run = resampling(run)
    seed = derive_seed("rollout", cfg.seed, step)
    if cfg.algo.dynamic_sampling:
        trajs, metrics = collect_dynamic(cfg, step, specs, run, seed, c.dist.rank, c.dist.world_size,
                                         step_indices={s.options["index"] for s in every})
    else:
        trajs, metrics = run(specs, seed), {}
    if harness is not None:
        metrics |= harness.metrics(trajs)
    return trajs, metrics


def harness_source(c: Components, cfg: TrainConfig, first: int) -> HarnessSource:
    """`rollout.source=harness`: this rank's episodes played by `env.harness` through the policy endpoint, in front
    of the run's engine, with the run's budgets and sampling settings (agents/endpoint/harness.py)."""
    r = cfg.rollout
    settings = EndpointSettings(r.max_new_tokens, r.max_response_tokens, stop_token_ids=list(r.stop_token_ids),
                                tool_format=cfg.env.style, first_index=first, temperature=r.temperature,
                                top_p=r.top_p, top_k=r.top_k)
    return HarnessSource(c.engine, c.agent, c.tokenizer, c.envs, load_harness(cfg.env.harness), settings,
                         concurrency=r.harness_concurrency, timeout_s=r.episode_timeout_s or None, pool=c.pool)


def compute_advantages(batch: Batch, cfg: TrainConfig, trajs: list[Trajectory], members: torch.Tensor,
                       per_episode: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages over the sampled tokens, (B, T): GRPO's group advantage per episode, or with
    `algo.advantage=gigpo` GiGPO's per turn (trainer/objective/gigpo.py, which reads the trajectories' turns), or with
    `opob` VCPO's off-policy optimal baseline (weights π_θold/μ of the prepared old_logp, trainer/algorithms/vcpo.py)
    unless `per_episode` asks for the episode's own GRPO one. `trajs`: the batch's E episodes; `members` (E,) bool:
    the episodes that count in their group's statistics (`advantage_members`). Statistics are over episodes, one
    value each whatever its number of traces; every trace (row) carries its episode's advantage."""
    if cfg.algo.advantage == "gigpo" and not per_episode:
        return gigpo_token_advantages(batch, cfg.algo, trajs, members)
    episodes = EpisodeRows.of(batch.episode_index, len(batch))
    first = episodes.first_rows()  # (E,) a row of each episode: its reward and group are the episode's
    opob = cfg.algo.advantage == "opob" and not per_episode
    log_w = sequence_log_weights(batch.old_logp, batch.rollout_logp, batch.loss_mask, episodes) if opob else None
    adv, metrics = group_advantages(batch.rewards[first], batch.group_ids[first], members=members, log_weights=log_w,
                                    norm_by_std=cfg.algo.adv_norm_by_std, leave_one_out=cfg.algo.adv_leave_one_out)
    return broadcast_advantages(episodes.per_row(adv), batch.loss_mask), metrics


def diagnostic_step(cfg: TrainConfig, step: int) -> bool:
    """Whether `step` runs the diagnostics that cost extra forwards (`diagnostics.every`)."""
    return cfg.diagnostics.every > 0 and is_periodic_step(step, cfg.diagnostics.every, 1, cfg.steps)


def ratio_probe(cfg: TrainConfig, step: int, k: int, num_minibatches: int) -> RatioProbe | None:
    """Table 5's probe for mini-batch k (trainer/diagnostics/ratio_diagnostics.py): on the first and the last mini-batch while
    `diagnostics.every` > 0, with its extra forwards on the steps `diagnostic_step` picks; else None."""
    suffixes = diag_suffixes(k, num_minibatches) if cfg.diagnostics.every else ()
    if not suffixes:
        return None
    return RatioProbe(cfg.algo, suffixes, extra_forwards=diagnostic_step(cfg, step), max_rows=cfg.diagnostics.rows)


def update(c: Components, cfg: TrainConfig, batch: Batch, step: int) -> dict[str, float]:
    """The mini-batch optimizer steps of one rollout batch (mini-batch k > 0 is off-policy on purpose)."""
    gen = torch.Generator().manual_seed(derive_seed("minibatches", cfg.seed, step))
    minibatches = minibatch_rows(len(batch), cfg.optim.num_minibatches, gen, batch.episode_index)
    diagnose = diagnostic_step(cfg, step)
    settings = UpdateSettings.from_config(cfg, c.dist)
    records = [update_policy(c.model, c.optimizer, batch, rows, settings, perturbation=c.perturbation,
                             noise_base=derive_seed("alp-noise", cfg.seed, step, k),
                             probe=ratio_probe(cfg, step, k, len(minibatches)), scaler=c.grad_scaler)
               for k, rows in enumerate(minibatches)]
    metrics = mean_of(records)
    metrics["actor/grad_norm_nonfinite"] = sum(r["actor/grad_norm_nonfinite"] for r in records)
    metrics["loss/first_minibatch"] = records[0]["loss/policy"]
    if diagnose:
        metrics |= policy_drift(c.model, batch, cfg.algo, cfg.rollout.temperature, cfg.optim.micro_batch_size,
                                max_rows=cfg.diagnostics.rows, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k)
    return metrics


def train_step(c: Components, cfg: TrainConfig, algos: AlgorithmState, step: int,
               rollouts: AsyncRollouts | None = None) -> StepResult:
    """One RL iteration: this step's rollouts (sampled now, or ahead by asynchronous `rollouts`), `learn`, and the
    step's sampling and timing metrics."""
    start = time.perf_counter()
    trajs, sampling = collect_step(c, cfg, step) if rollouts is None else rollouts.get(step)
    sampled = time.perf_counter()
    sampling = sampling | staleness_metrics(trajs, c.policy_version) | mask_stale_tokens(
        trajs, c.policy_version, cfg.rollout.max_token_version_gap, cfg.rollout.stale_token_policy)
    result = learn(c, cfg, algos, trajs, step, sync=rollouts is None)
    result.trajectories = trajs
    if rollouts is not None:  # waits for the rollouts on the older weights, pushes θ_step, starts the next batch
        rollouts.after_update(step)
    result.metrics |= sampling | step_timing(trajs, start, sampled, time.perf_counter(), c.dist.device)
    if rollouts is not None:  # the batch's lag, the trainer's waits, the producer's own rollout time
        result.metrics |= rollouts.metrics(trajs)
    return result


def step_timing(trajs: list[Trajectory], start: float, sampled: float, end: float,
                device: torch.device) -> dict[str, float]:
    """`perf/*`: seconds of the rollout and of the rest of the step (update and weight sync), sampled tokens per
    second of rollout, and peak memory so far (the device's allocator on a GPU, else the process's max RSS)."""
    tokens = sum(t.episode_sampled_tokens for t in trajs)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"perf/rollout_s": sampled - start, "perf/update_s": end - sampled, "perf/step_s": end - start,
            "perf/rollout_tokens_per_s": tokens / max(sampled - start, 1e-9), "perf/peak_memory_gib": peak / 2**30}


def prepare_batch(c: Components, cfg: TrainConfig, trajs: list[Trajectory],
                  for_update: bool = True) -> tuple[Batch, dict[str, float]]:
    """Rollouts → the Batch every later stage reads, and its metrics: `collate`, then the one writer of each later
    field: old_logp (θ as it is now), ref_logp and the KL reward (with a reference), advantages, corr_weights /
    corr_keep (`prepare_corrections`, once per rollout batch) and quatro_targets (algo.quatro_delta > 0).

    `for_update=False` is MIPU's validation batch, which only its gap proxy reads: prepared after the update, its
    old_logp is log π_{k+1}; its advantages are GRPO's per episode even under GiGPO (the proxy weighs whole
    episodes); the fields only the update reads (ref_logp, the KL reward, corrections, QUATRO targets) stay unset.
    """
    batch = collate(trajs, c.tokenizer.pad_token_id)
    # tokens each forward of the batch runs over (prompt + response of every row: a trace repeats its history)
    metrics: dict[str, float] = {"perf/batch_tokens": float(batch.attention_mask.sum())}
    r, truncation = cfg.rollout, TruncationProbe()  # the sampler's top-p / top-k, replayed by every log-prob pass
    full_kl = FullVocabKL(r.top_p, r.top_k)  # with rollout.logprobs_topk: KL over the vocabulary, same forward
    batch.old_logp = old_logprobs(c.model, batch, r.temperature, cfg.optim.micro_batch_size, top_p=r.top_p,
                                  top_k=r.top_k, probe=truncation, logits_hook=full_kl.add_logits)
    metrics |= truncation.report() | full_kl.report()
    if for_update and c.reference is not None:  # KL to the frozen start (algo.kl_coef): its log-probs beside θ_old's
        batch.ref_logp = reference_logprobs(c.reference, batch, r.temperature, cfg.optim.micro_batch_size,
                                            top_p=r.top_p, top_k=r.top_k)
        if cfg.algo.kl_in_reward:
            batch.rewards, kl_metrics = kl_reward_penalty(cfg.algo, batch)
            metrics |= kl_metrics
    members = torch.tensor(advantage_members(trajs, cfg.rollout.infra_failures), dtype=torch.bool)  # (E,)
    batch.advantages, adv_metrics = compute_advantages(batch, cfg, trajs, members, per_episode=not for_update)
    metrics |= adv_metrics
    if not for_update:
        return batch, metrics
    batch.corr_weights, batch.corr_keep, corr_metrics = prepare_corrections(
        cfg.algo, batch, batch_sum=c.dist.all_reduce_sum if c.dist.enabled else None)
    metrics |= corr_metrics
    if cfg.algo.quatro_delta:  # QUATRO: per-query duals → trust-region target log-ratios
        batch.quatro_targets, quatro_metrics = quatro_targets(cfg.algo, batch, members)
        metrics |= quatro_metrics
    return batch, metrics


def mipu_screening(c: Components, cfg: TrainConfig, history: MipuHistory, snapshot: Snapshot,
                   step: int) -> dict[str, float]:
    """MIPU's screen of the candidate, already synced to the engine: fresh validation groups sampled from it,
    prepared as the update's batch is (`for_update=False`), their gap proxy T̂, then keep or roll back."""
    val, val_metrics = prepare_batch(c, cfg, validation_rollouts(c, cfg, step), for_update=False)
    t_post, metrics = validation_gap(val, val_metrics, c.dist)
    return metrics | screen_candidate(c, cfg, history, snapshot, step, t_post)


def sprpo_allocation(c: Components, cfg: TrainConfig, algos: AlgorithmState, batch: Batch,
                     step: int) -> dict[str, float]:
    """SPrPO (`perturb.sprpo_adaptive`): σ per layer from a sensitivity probe on `batch`, every `sprpo_every` steps;
    {} otherwise."""
    if not cfg.perturb.sprpo_adaptive:
        return {}
    return algos.sprpo.maybe_allocate(c.model, c.perturbation, batch, cfg, step, c.dist)


def mismatch_report(c: Components, cfg: TrainConfig, batch: Batch, step: int) -> dict[str, float]:
    """The sampler's μ against the trainer's π_θold on `batch`, before the update: the §4 metrics
    (`mismatch_diagnostics`), the dialled mismatch behind them (`mismatch/*`: fake quantization, dtype, policy lag)
    and, on rank 0 every `diagnostics.scatter_every` steps, Fig. 10's scatter sample."""
    metrics = mismatch_diagnostics(batch.old_logp, batch.rollout_logp, batch.loss_mask, batch.rewards, step=step)
    if c.sampler is not None:
        metrics |= c.sampler.metrics()
    if c.dist.is_main and is_periodic_step(step, cfg.diagnostics.scatter_every, 1, cfg.steps):
        metrics |= save_scatter(cfg.output_dir, step, batch.old_logp, batch.rollout_logp, batch.loss_mask,
                                seed=cfg.seed, max_points=cfg.diagnostics.scatter_points)
    return metrics


def learn(c: Components, cfg: TrainConfig, algos: AlgorithmState, trajs: list[Trajectory], step: int,
          sync: bool = True) -> StepResult:
    """Everything of a step after its rollouts, one named call per stage, in order (`sync=False`: the caller syncs
    the engine, as asynchronous rollouts do)."""
    metrics = rollout_metrics(trajs)  # the episodes' own rewards, before any shaping
    metrics |= settle_infra_failures(trajs, cfg.rollout.infra_failures)  # a group's lone valid member: out
    metrics |= overlong_shaping(cfg, trajs)  # DAPO's overlong filter and soft punishment (no-op when off)
    batch, batch_metrics = prepare_batch(c, cfg, trajs)  # θ_old log-probs, advantages, corrections: the Batch
    metrics |= batch_metrics
    metrics |= sprpo_allocation(c, cfg, algos, batch, step)  # SPrPO's σ per layer (no-op when off)
    metrics |= mismatch_report(c, cfg, batch, step)  # sampler vs trainer on this batch, before the update
    snapshot = candidate_snapshot(c) if cfg.algo.mipu_screen else None  # MIPU: what a rollback restores
    c.engine.sleep()  # a GPU sampler with rollout.enable_sleep_mode frees its memory for the update (else no-op)
    metrics |= update(c, cfg, batch, step)
    c.engine.wake_up()
    if sync:
        metrics |= c.sync_engine()  # with rollout.verify_weight_sync: checked, rollout/weight_sync_ok
    if snapshot is not None:  # MIPU: keep the candidate only if the deployed policy's gap proxy passes
        metrics |= mipu_screening(c, cfg, algos.mipu, snapshot, step)
    return StepResult(step, metrics)


def on_eval_schedule(cfg: TrainConfig, step: int) -> bool:
    """Every `eval_every` steps and the last: held-out evaluation (with `eval_tasks`) and Trackio's episode table."""
    return (cfg.eval_every > 0 and step % cfg.eval_every == 0) or step == cfg.steps


def evaluate(c: Components, cfg: TrainConfig, step: int) -> dict[str, float]:
    """Held-out (test split) evaluation; per-episode records go to `<run>/eval/step_<k>.jsonl`. Under data
    parallelism rank 0 evaluates alone (the same records as one process; the others wait) and the summary is
    broadcast."""
    s = eval_settings(cfg)  # what `alprl eval` and `alprl robustness` read from a checkpoint's run config too
    summary = None
    with c.trainer_weights_in_engine():  # not the sampler's quantized / lagged view, as `alprl eval` sees it
        if c.dist.is_main:  # (every rank swaps weights in step: sharded parameters are gathered together)
            summary = summarize(evaluation_episodes(c, cfg, s, step), "eval")
        summary = c.dist.broadcast_object(summary)
    return summary


def evaluation_episodes(c: Components, cfg: TrainConfig, s, step: int) -> list[dict]:
    """The held-out records of step `step`, written to `<run>/eval/step_<k>.jsonl`."""
    envs = c.envs if len(c.envs) >= s.num_envs else make_envs(cfg, s.num_envs)  # a rank holds its share only
    try:
        records = evaluation_records(c.engine, c.agent, envs[: s.num_envs], "test", cfg.eval_tasks, s.limits,
                                     samples_per_task=s.samples_per_task, greedy=s.greedy, seed=s.seed, pool=c.pool)
    finally:
        if envs is not c.envs:
            for env in envs:
                env.close()
    out = Path(cfg.output_dir) / "eval"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"step_{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def extra_state(c: Components, algos: AlgorithmState, rollouts: AsyncRollouts | None = None) -> dict:
    """Trainer state that is not part of the HF model (never exported): the ALP log σ, the algorithms' state,
    the batches asynchronous rollouts sampled with older weights, fp16's loss scale."""
    extra = {"perturbation": c.perturbation.state_dict() if c.perturbation else None,
             "algorithms": algos.state_dict(),
             "grad_scaler": c.grad_scaler.state_dict() if c.grad_scaler else None}
    if rollouts is not None:
        extra["async_rollouts"] = rollouts.state_dict()
    return extra


def load_extra_state(c: Components, algos: AlgorithmState, state: dict) -> int:
    """Restore `extra_state()` from a checkpoint's trainer state; returns the checkpoint's step."""
    extra = state.get("extra", {})
    if c.perturbation is not None and extra.get("perturbation") is not None:
        c.perturbation.load_state_dict(extra["perturbation"])
    algos.load_state_dict(extra.get("algorithms") or {})
    if c.grad_scaler is not None and extra.get("grad_scaler"):  # else (saved by an fp32/bf16 run) its init scale
        c.grad_scaler.load_state_dict(extra["grad_scaler"])
    return state["step"]


def train(cfg: TrainConfig, *, resume: bool = False, show_progress: bool = True,
          evaluate_at_start: bool = False, step_lines: bool = False) -> list[StepResult]:
    """Run `cfg.steps` RL iterations (continuing from the latest checkpoint with `resume`).

    With `eval_tasks > 0`, held-out evaluation runs every `eval_every` steps and after the last step,
    and with `evaluate_at_start` (or `cfg.eval_at_start`) also before any update (logged as the step-0 record).
    Without a progress bar, `step_lines` prints one plain line a step instead (`alprl train --no-progress`).
    """
    run_dir = Path(cfg.output_dir)
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {run_dir / 'checkpoints'}; run without --resume")
    require_logger_packages(wandb=cfg.logging.wandb, trackio=cfg.logging.trackio)  # a missing one: before anything
    ctx = init_distributed(cfg)  # torchrun's process group and this rank's device (one CPU process: nothing)
    try:
        return _train(cfg, ctx, ckpt, show_progress, evaluate_at_start, step_lines)
    finally:
        close_distributed(ctx)


def _train(cfg: TrainConfig, ctx: DistContext, ckpt: Path | None, show_progress: bool,
           evaluate_at_start: bool, step_lines: bool) -> list[StepResult]:
    run_dir = Path(cfg.output_dir)
    seed_everything(cfg.seed)
    c = build_components(cfg, init_from=str(ckpt) if ckpt else None, ctx=ctx)
    algos = AlgorithmState()
    state = load_trainer_state(ckpt, c.optimizer, model=c.model, ctx=ctx) if ckpt else {}
    start = load_extra_state(c, algos, state) if ckpt else 0
    if ckpt:  # the engine holds the checkpoint's weights: its tokens are that version's
        c.policy_version = c.engine.weight_version = start
    main = ctx.is_main  # rank 0 alone writes the run's files
    run_meta = start_run_meta(run_dir, cfg, resuming=ckpt is not None, engine=c.engine_kind) if main else None
    logger = MetricLogger(run_dir, resume_step=start if ckpt else None, use_wandb=cfg.logging.wandb,
                          use_trackio=cfg.logging.trackio, project=cfg.logging.project,
                          config=to_dict(cfg) | {"run_meta": run_meta}) if main else None
    results, rollouts = [], None
    watch = OutageWatch(cfg.rollout.max_infra_frac, cfg.rollout.infra_patience, cfg.env.sandbox_url, cfg.env.harness)
    drift = DriftAlarm(cfg.diagnostics.drift_window, cfg.diagnostics.drift_bound)
    flat = DegenerateWatch(cfg.degenerate_patience, cfg.fail_on_degenerate)
    try:
        if cfg.eval_tasks and (evaluate_at_start or cfg.eval_at_start) and start == 0:
            at_start = evaluate(c, cfg, 0)
            if logger:
                logger.log(0, at_start)
        rollouts = start_async(c, cfg, lambda k: collect_step(c, cfg, k), start, state.get("extra", {}))
        with progress_bar("RL", total=cfg.steps, completed=start, enabled=show_progress and main,
                          lines_every_step=step_lines and main) as bar:
            for step in range(start + 1, cfg.steps + 1):
                try:
                    result = train_step(c, cfg, algos, step, rollouts)
                except WeightSyncError:  # the step's record says so before the run stops
                    if logger:
                        logger.log(step, {"rollout/weight_sync_ok": 0.0})
                    raise
                if cfg.eval_tasks and on_eval_schedule(cfg, step):
                    if rollouts is not None:  # the engine has one user at a time
                        rollouts.drain()
                    result.metrics |= evaluate(c, cfg, step)
                result.metrics = ctx.mean_metrics(result.metrics)  # over ranks (the loss and grad norm are global)
                outage = watch.after_step(step, result.metrics)  # the same on every rank: metrics are the mean
                result.metrics |= outage.metrics  # rollout/infra_over_bound: the run report lists the step
                if outage.warning and main:
                    print(f"alprl: warning: {outage.warning}", file=sys.stderr)
                drift_metrics, drift_warning = drift.update(step, result.metrics)  # a creeping mismatch KL
                result.metrics |= drift_metrics
                if drift_warning and main:
                    print(f"alprl: warning: {drift_warning}", file=sys.stderr)
                flat_warning, flat_stop = flat.after_step(step, result.metrics)  # groups with one reward each
                if flat_warning and main:
                    print(f"alprl: warning: {flat_warning}", file=sys.stderr)
                if logger:
                    logger.log(step, result.metrics)
                    if on_eval_schedule(cfg, step) and logger.keeps_episodes:  # a few episodes as text (Trackio)
                        logger.log_episodes(step, EPISODE_COLUMNS, episode_table(result.trajectories, c.tokenizer))
                result.trajectories = []  # `results` keeps every step's metrics, not its batch
                results.append(result)
                if step % cfg.save_every == 0 or step == cfg.steps or outage.stop or flat_stop:
                    save_checkpoint(run_dir, step, c.model, c.tokenizer, c.optimizer,
                                    extra=extra_state(c, algos, rollouts), run_config=cfg, run_meta=run_meta, ctx=ctx)
                bar.advance(reward=result.metrics["rollout/reward"], loss=result.metrics["loss/policy"])
                if outage.stop:  # trainer/runtime/outage.py: the infrastructure kept failing; --resume goes on here
                    raise InfraOutage(outage.stop)
                if flat_stop:  # trainer/diagnostics/degenerate.py: nothing to learn from, and the user asked to stop
                    raise DegenerateRun(flat_stop)
    finally:
        if rollouts is not None:  # before the engine closes
            rollouts.close()
        if logger:
            logger.close()
        c.close()
    return results
