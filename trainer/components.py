"""Build what a run needs from its config: model, tokenizer, engine, envs, agent, optimizer.

The env, its agent and wrappers come from the env-family table (`agents/env_families.py`); which task each
episode plays is `trainer/tasks.py`'s.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.engines import Engine, auto_engine, make_engine, resolve_kind, vllm_only
from agents.engines.vllm_lora import lora_engine_options
from agents.env_families import make_agent, make_env
from agents.models import load_model_and_tokenizer
from agents.perturbation import LayerwisePerturbation
from agents.rollout import Agent
from trainer.config.rollout_config import engine_options
from trainer.config.train_config import TrainConfig
from trainer.reference import frozen
from trainer.runtime.distributed import SINGLE, DistContext, build_grad_scaler, shard_policy, visible_devices
from trainer.runtime.lora import AdaptersOff, apply_lora, choose_sync, load_adapter_weights, trainable_count
from trainer.runtime.memory_plan import host_memory_warning
from trainer.runtime.sampler_mismatch import (
    AdapterSync,
    SamplerSync,
    full_named_parameters,
    parse_sampler_quant,
)
from trainer.sft.cache import check_warm_start

if TYPE_CHECKING:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

log = logging.getLogger(__name__)


@dataclass
class Components:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    engine: Engine
    agent: Agent
    envs: list[gym.Env]
    optimizer: torch.optim.Optimizer
    perturbation: LayerwisePerturbation | None = None
    reference: torch.nn.Module | None = None
    """The frozen starting policy of the KL term (algo.kl_coef > 0; trainer/reference.py); under LoRA the policy
    with its adapters off (trainer/runtime/lora.py `AdaptersOff`); None without one."""
    sampler: SamplerSync | None = None
    """What the engine holds (fake-quantized, lagged weights; trainer/runtime/sampler_mismatch.py; a LoRA policy's
    adapters: `AdapterSync` there); None: the trainer's."""
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=8))
    dist: DistContext = SINGLE
    """This process's rank, world size and device (trainer/runtime/distributed.py)."""
    engine_kind: str = ""
    """The engine that samples (vllm | hf): `rollout.engine`, or what `auto` chose for this model and device; the
    run's run_meta.json and an experiment cell's cell.json record it (empty: a hand-built bundle in a test)."""
    verify_sync: bool = False
    """Whether the engine checks every weight push by checksums (rollout.verify_weight_sync, and an engine that
    can: agents/engines/weight_check.py)."""
    grad_scaler: ShardedGradScaler | None = None
    """fp16's dynamic loss scaler (distributed.mixed_precision=fp16), its state saved with checkpoints; None
    otherwise. MIPU's rollback restores the model and optimizer, not the scale: it tracks fp16's range, not the
    policy."""

    def extra_modules(self) -> list[torch.nn.Module]:
        """Trainable state beside the model and its optimizer (the ALP log σ), for snapshots and checkpoints."""
        return [self.perturbation] if self.perturbation is not None else []

    policy_version: int = 0
    """The trainer's update count (the step whose update it finished; the checkpoint's step on resume): the
    version `sync_engine` gives the weights it pushes (`Engine.weight_version`, less the sampler's lag)."""

    def sync_engine(self) -> dict[str, float]:
        """Push the trainer's weights into the inference engine (after every accepted or rolled-back update), as
        the sampler sees them: fake-quantized with rollout.sampler_quant, rollout.policy_lag updates old. Returns
        `rollout/weight_sync_ok` = 1 when the engine checked the push (rollout.verify_weight_sync; a push that
        fails the check raises `WeightSyncError` instead), else nothing."""
        if self.sampler is None:
            self.engine.update_weights(full_named_parameters(self.model))
        else:
            self.sampler.push_update(self.engine, self.model)
        self.policy_version += 1
        lag = self.sampler.version - self.sampler.pushed_version() if self.sampler is not None else 0
        self.engine.weight_version = self.policy_version - lag  # what each token it samples next records
        return {"rollout/weight_sync_ok": 1.0} if self.verify_sync else {}

    @contextmanager
    def trainer_weights_in_engine(self) -> Iterator[None]:
        """Held-out evaluation measures the trained policy (what checkpoints and `alprl eval` hold), not the
        sampler's quantized or lagged view: the trainer's weights are in the engine for the block, then the
        sampler's view is pushed back (two extra syncs, only when the knobs are on)."""
        if self.sampler is None or not self.sampler.differs:
            yield
            return
        self.sampler.push_trainer_weights(self.engine, self.model)
        try:
            yield
        finally:
            self.sampler.push_current(self.engine, self.model)

    def close(self) -> None:
        self.pool.shutdown()
        if self.sampler is not None:
            self.sampler.close()
        self.engine.close()  # bounded in time, also when the engine's process died or hangs
        for env in self.envs:
            env.close()


def policy_path(cfg: TrainConfig) -> str:
    """The model to start from: `model.path`, else the SFT warm start in `sft.output_dir`."""
    path = cfg.model.path or cfg.sft.output_dir
    if not cfg.model.path and not Path(path).expanduser().exists():
        raise FileNotFoundError(f"no warm-start model at {path}: run `alprl sft` first or set model.path=<dir>")
    if not cfg.model.path and not (Path(path).expanduser() / "config.json").is_file():  # save_pretrained comes last
        raise FileNotFoundError(f"the SFT warm start in {path} is incomplete (no config.json: the `alprl sft` that "
                                "builds it has not finished); rerun `alprl sft` with the same --config and "
                                "overrides (it continues from its resume point) or set model.path=<dir>")
    check_warm_start(cfg)
    return path


def make_envs(cfg: TrainConfig, n: int) -> list[gym.Env]:
    return [make_env(cfg.env) for _ in range(n)]


def build_perturbation(model: torch.nn.Module, cfg: TrainConfig) -> LayerwisePerturbation | None:
    if not cfg.perturb.enabled:
        return None
    p = cfg.perturb
    return LayerwisePerturbation(model, layers=p.layers, sigma_init=p.sigma_init, learnable=p.learnable,
                                 logits_only=p.logits_only, sigma_mode=p.sigma_mode)


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig,
                    perturbation: LayerwisePerturbation | None = None) -> torch.optim.Optimizer:
    """AdamW over the policy; ALP's log σ get their own param group (own lr and weight decay)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": params}]
    if perturbation is not None and perturbation.learnable:
        groups.append(perturbation.param_group(lr=cfg.perturb.lr, weight_decay=cfg.perturb.weight_decay))
    optimizer = torch.optim.AdamW(groups, lr=cfg.optim.lr, betas=tuple(cfg.optim.betas),
                                  weight_decay=cfg.optim.weight_decay)
    in_groups = [id(p) for g in optimizer.param_groups for p in g["params"]]
    assert len(in_groups) == len(set(in_groups)), "a parameter is in two optimizer groups"
    return optimizer


def start_engine(cfg: TrainConfig, kind: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, start: str,
                 ctx: DistContext, adapters: bool = False) -> Engine:
    """The rollout engine (`kind`: vllm | hf) on the start model's weights, built before any LoRA wrapper or FSDP
    shards them (the transformers engine keeps its own copy); `adapters`: vLLM serves LoRA adapters."""
    r = cfg.rollout
    options = engine_options(r) | (lora_engine_options(cfg.model.lora.r) if adapters else {})
    with visible_devices(ctx):  # a rank's colocated vLLM sees only the rank's own GPU
        engine = make_engine(kind, model, tokenizer, model_path=start, dtype=r.dtype, temperature=r.temperature,
                             top_p=r.top_p, top_k=r.top_k, seed=cfg.seed, schedule=r.schedule,
                             verify_sync=r.verify_weight_sync, logprobs_topk=r.logprobs_topk, **options)
    if r.engine == "auto" and ctx.rank == 0:  # one line: which engine, and why (rollout.engine= overrides it)
        kind, why = auto_engine(sum(p.numel() for p in model.parameters()),
                                vllm_only_option=vllm_only(r.schedule, engine_options(r)))
        print(f"alprl: rollout.engine=auto chose {kind} ({why})", file=sys.stderr)
    if engine.max_model_len <= r.max_response_tokens:
        log.warning("the model's context (%d tokens, from %s) cannot hold a prompt plus rollout.max_response_tokens="
                    "%d: episodes end when the context is full. Lower rollout.max_response_tokens, or rebuild the "
                    "SFT model (`alprl sft --force`), which sizes its context to the budget",
                    engine.max_model_len, start, r.max_response_tokens)
    return engine


def lora_policy(model: PreTrainedModel, cfg: TrainConfig, start: str, init_from: str | None, sync: tuple[str, str],
                ctx: DistContext) -> torch.nn.Module:
    """The start model wrapped with `model.lora`'s adapters, the checkpoint's loaded on resume; rank 0 prints one
    line: what trains and how the engine gets it (`sync`: the mode and why, trainer/runtime/lora.py)."""
    lo = cfg.model.lora
    model = apply_lora(model, lo, cfg.seed, start)
    if init_from:
        load_adapter_weights(model, init_from)
    if ctx.rank == 0:
        trainable, total = trainable_count(model)
        print(f"alprl: LoRA r={lo.r} alpha={lo.alpha:g} on {','.join(lo.target_modules)}: {trainable / 1e6:.2f}M of "
              f"{total / 1e6:.2f}M parameters train; model.lora.sync={lo.sync} chose {sync[0]} ({sync[1]})",
              file=sys.stderr)
    return model


def build_components(cfg: TrainConfig, init_from: str | None = None, num_envs: int | None = None,
                     ctx: DistContext = SINGLE) -> Components:
    """Everything a run needs on this rank; `num_envs` defaults to this rank's episodes per step. Under LoRA
    (model.lora.r > 0) the model is the start model also on resume (`init_from` a checkpoint), and the adapters
    wrap it after the engine has taken its weights."""
    lora = cfg.model.lora.r > 0
    start = policy_path(cfg) if lora or not init_from else init_from  # policy_path checks the warm start once
    model, tokenizer = load_model_and_tokenizer(start)
    model.train()
    r = cfg.rollout
    kind = resolve_kind(r.engine, sum(p.numel() for p in model.parameters()),
                        vllm_only_option=vllm_only(r.schedule, engine_options(r)))
    sync = choose_sync(cfg.model.lora, kind, r) if lora else ("", "")
    engine = start_engine(cfg, kind, model, tokenizer, start, ctx, adapters=sync[0] == "adapter")
    if ctx.rank == 0 and (memory_warning := host_memory_warning(cfg)) is not None:
        log.warning("%s", memory_warning)
    if lora:
        model = lora_policy(model, cfg, start, init_from, sync, ctx)
    n = num_envs or cfg.rollout.prompts_per_step * cfg.rollout.group_size // ctx.world_size
    model = shard_policy(model.to(ctx.device), cfg, ctx)  # FSDP2 under torchrun (no-op on one CPU process)
    perturbation = build_perturbation(model, cfg)
    if perturbation is not None:
        perturbation.to(ctx.device)
    if sync[0] == "adapter":  # the engine holds the start model; the adapters go in now
        sampler = AdapterSync(model, r.dtype)
    else:
        sampler = SamplerSync(model, parse_sampler_quant(r.sampler_quant, r.sampler_quant_group), r.policy_lag,
                              r.dtype)
    if lora and init_from and sync[0] == "merged":
        sampler.push_current(engine, model)  # the engine loaded the start model: the checkpoint's merged policy
    else:
        sampler.initial_push(engine, model)  # the engine loaded full-precision weights
    return Components(model=model, tokenizer=tokenizer, engine=engine, agent=make_agent(cfg.env, tokenizer),
                      envs=make_envs(cfg, n), optimizer=build_optimizer(model, cfg, perturbation),
                      perturbation=perturbation, reference=reference_policy(cfg, model, ctx), sampler=sampler,
                      pool=ThreadPoolExecutor(max_workers=cfg.rollout.env_concurrency, thread_name_prefix="env-step"),
                      dist=ctx, engine_kind=kind, grad_scaler=build_grad_scaler(cfg, ctx),
                      verify_sync=engine.verify_sync and sync[0] != "adapter")


def reference_policy(cfg: TrainConfig, model: torch.nn.Module, ctx: DistContext) -> torch.nn.Module | None:
    """The KL term's frozen start (algo.kl_coef > 0; None otherwise): loaded from the start, also on resume, so the
    KL keeps its anchor; under LoRA the policy with its adapters off, which is the start without a second copy."""
    if not cfg.algo.kl_coef:
        return None
    if cfg.model.lora.r > 0:
        return AdaptersOff(model)
    return frozen(load_model_and_tokenizer(policy_path(cfg))[0].to(ctx.device))
