"""Build what a run needs from its config: model, tokenizer, engine, envs, agent, optimizer.

Task selection lives here too (`episode_specs`): which task each episode of step k plays, derived only
from (seed, split, step) so resumed runs replay the same tasks.
"""

from __future__ import annotations

import logging
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.agent_factory import make_agent, wrap_env
from agents.engines import Engine, make_engine
from agents.models import load_model_and_tokenizer
from agents.perturbation import LayerwisePerturbation
from agents.projection import ActionProjection
from agents.rollout import Agent, EpisodeSpec, RolloutLimits
from envs import generated_twin  # (importing envs registers the alprl/* environments)
from trainer.algorithms import AlgorithmHooks
from trainer.config import ConfigError, TrainConfig
from trainer.sft_cache import check_warm_start

log = logging.getLogger(__name__)
TRAIN_INDICES = range(1_500, 101_500)  # RL draws train tasks here (the train split starts at global index 1500)


@dataclass
class Components:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    engine: Engine
    agent: Agent
    envs: list[gym.Env]
    optimizer: torch.optim.Optimizer
    perturbation: LayerwisePerturbation | None = None
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=8))
    hooks: AlgorithmHooks = field(default_factory=AlgorithmHooks)

    def extra_state(self) -> dict:
        """Trainer state that is not part of the HF model (never exported): the ALP log σ values."""
        return {"perturbation": self.perturbation.state_dict() if self.perturbation else None,
                "algorithms": self.hooks.state_dict()}

    def load_extra_state(self, state: dict) -> int:
        """Restore `extra_state()` from a checkpoint's trainer state; returns the checkpoint's step."""
        saved = state.get("extra", {}).get("perturbation")
        if self.perturbation is not None and saved is not None:
            self.perturbation.load_state_dict(saved)
        self.hooks.load_state_dict(state.get("extra", {}).get("algorithms") or {})
        return state["step"]

    def close(self) -> None:
        self.pool.shutdown()
        close_engine = getattr(self.engine, "close", None)
        if close_engine is not None:  # vLLM engines own worker processes
            close_engine()
        for env in self.envs:
            env.close()


def policy_path(cfg: TrainConfig) -> str:
    """The model to start from: `model.path`, else the SFT warm start in `sft.output_dir`."""
    path = cfg.model.path or cfg.sft.output_dir
    if not Path(path).expanduser().exists() and not cfg.model.path:
        raise FileNotFoundError(f"no warm-start model at {path}: run `alprl sft` first or set model.path=<dir>")
    check_warm_start(cfg)
    return path


def env_kwargs(cfg: TrainConfig) -> dict:
    """Constructor arguments for the configured env (each env takes the keys it knows)."""
    e = cfg.env
    if e.id.startswith("alprl/TIRMath"):
        return {"style": e.style, "max_turns": e.max_turns, "difficulty": e.difficulty or None,
                "task_types": e.task_types or None, "sandbox_url": e.sandbox_url or None,
                "run_timeout_s": e.run_timeout_s}
    limit = {"max_steps": e.max_steps} if e.max_steps else {}
    if e.id == "alprl/ALFWorld-v0":
        return {"data_path": e.alfworld_data or None, "task_types": e.task_types or None} | limit
    if e.id == "alprl/WebShopServer-v0":
        return {"server_url": e.webshop_url or None} | limit
    if e.id.startswith("alprl/Household"):
        return {"task_types": e.task_types or None} | limit
    if e.id.startswith("alprl/WebShop"):
        return {"num_products": e.num_products} | limit
    return {}


def make_env(cfg: TrainConfig) -> gym.Env:
    """The configured env as rollouts, evaluation and SFT experts use it (action projection, the agent's wrapper;
    every alprl env takes the global `index` reset option itself)."""
    e = cfg.env
    twin = generated_twin(e.id)
    env = gym.make(e.id, **env_kwargs(cfg))
    if twin.startswith(("alprl/Household", "alprl/WebShop")):
        env = ActionProjection(env, e.action_projection, e.projection_min_similarity,
                               e.invalid_action_penalty)
    elif (e.action_projection, e.invalid_action_penalty) != ("exact", 0.0):
        raise ConfigError(f"env.action_projection / env.invalid_action_penalty need an env with admissible commands "
                          f"(household, WebShop); {e.id} has none")
    return wrap_env(twin, env)


def make_envs(cfg: TrainConfig, n: int) -> list[gym.Env]:
    return [make_env(cfg) for _ in range(n)]


def build_perturbation(model: torch.nn.Module, cfg: TrainConfig) -> LayerwisePerturbation | None:
    if not cfg.perturb.enabled:
        return None
    p = cfg.perturb
    return LayerwisePerturbation(model, p.layers, p.sigma_init, p.learnable, p.logits_only)


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig,
                    perturbation: LayerwisePerturbation | None = None) -> torch.optim.Optimizer:
    """AdamW over the policy; ALP's log σ get their own param group (own lr and weight decay)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": params}]
    if perturbation is not None and perturbation.learnable:
        groups.append(perturbation.param_group(cfg.perturb.lr, cfg.perturb.weight_decay))
    optimizer = torch.optim.AdamW(groups, lr=cfg.optim.lr, betas=tuple(cfg.optim.betas),
                                  weight_decay=cfg.optim.weight_decay)
    in_groups = [id(p) for g in optimizer.param_groups for p in g["params"]]
    assert len(in_groups) == len(set(in_groups)), "a parameter is in two optimizer groups"
    return optimizer


def build_components(cfg: TrainConfig, init_from: str | None = None, num_envs: int | None = None) -> Components:
    start = init_from or policy_path(cfg)  # checks the warm start once
    model, tokenizer = load_model_and_tokenizer(start)
    model.train()
    r = cfg.rollout
    engine = make_engine(r.engine, model, tokenizer, model_path=start, dtype=r.dtype,
                         temperature=r.temperature, top_p=r.top_p, seed=cfg.seed, schedule=r.schedule,
                         gpu_memory_utilization=r.gpu_memory_utilization,
                         tensor_parallel_size=r.tensor_parallel_size, quantization=r.quantization or None,
                         kv_cache_dtype=r.kv_cache_dtype, max_model_len=r.max_model_len or None,
                         enable_sleep_mode=r.enable_sleep_mode)
    if engine.max_model_len <= r.max_response_tokens:
        log.warning("the model's context (%d tokens, from %s) cannot hold a prompt plus rollout.max_response_tokens="
                    "%d: episodes end when the context is full. Lower rollout.max_response_tokens, or rebuild the "
                    "SFT model (`alprl sft --force`), which sizes its context to the budget",
                    engine.max_model_len, start, r.max_response_tokens)
    n = num_envs or cfg.rollout.prompts_per_step * cfg.rollout.group_size
    perturbation = build_perturbation(model, cfg)
    return Components(model=model, tokenizer=tokenizer, engine=engine, agent=make_agent(cfg.env, tokenizer),
                      envs=make_envs(cfg, n), optimizer=build_optimizer(model, cfg, perturbation),
                      perturbation=perturbation, pool=ThreadPoolExecutor(max_workers=cfg.rollout.env_concurrency,
                                                                          thread_name_prefix="env-step"))


def rollout_limits(cfg: TrainConfig) -> RolloutLimits:
    r = cfg.rollout
    return RolloutLimits(r.max_new_tokens, r.max_response_tokens, r.max_obs_tokens,
                         episode_timeout_s=r.episode_timeout_s or None)


def episode_specs(cfg: TrainConfig, split: str, step: int, num_tasks: int, group_size: int) -> list[EpisodeSpec]:
    """Tasks of one batch: train draws `num_tasks` random indices per step; test takes indices 0..num_tasks-1."""
    if split == "train":
        rng = random.Random(cfg.seed * 100_003 + step)
        indices = rng.sample(TRAIN_INDICES, num_tasks)
    else:
        indices = list(range(num_tasks))
    return [EpisodeSpec(seed=index, options={"split": split, "index": index}, group_id=g)
            for g, index in enumerate(indices) for _ in range(group_size)]
