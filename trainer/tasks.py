"""Task selection: which task each episode of a step plays, and the limits every rollout runs under.

Everything here derives only from (seed, split, step), so a resumed run replays the same tasks. Index ranges
come from `envs/splits.py`: RL trains on `RL_TRAIN_INDICES`, evaluates on the test split's first indices, and
MIPU validates on other train indices than the step's own.
"""

from __future__ import annotations

import random

from agents.rollout import EpisodeSpec, RolloutLimits
from envs.splits import RL_TRAIN_INDICES, derive_seed
from trainer.config import TrainConfig


def rollout_limits(cfg: TrainConfig) -> RolloutLimits:
    r = cfg.rollout
    return RolloutLimits(r.max_new_tokens, r.max_response_tokens, r.max_obs_tokens,
                         episode_timeout_s=r.episode_timeout_s or None, mask_void_turns=cfg.env.mask_void_turns)


def group_specs(indices: list[int], split: str, group_size: int) -> list[EpisodeSpec]:
    """`group_size` episodes of each task index, one GRPO group per index."""
    return [EpisodeSpec(seed=index, options={"split": split, "index": index}, group_id=g)
            for g, index in enumerate(indices) for _ in range(group_size)]


def train_indices(cfg: TrainConfig, step: int, num_tasks: int) -> list[int]:
    """The train tasks of step `step`: `num_tasks` distinct indices of `RL_TRAIN_INDICES`."""
    return random.Random(derive_seed("train-tasks", cfg.seed, step)).sample(RL_TRAIN_INDICES, num_tasks)


def episode_specs(cfg: TrainConfig, split: str, step: int, num_tasks: int, group_size: int) -> list[EpisodeSpec]:
    """Tasks of one batch: train draws `num_tasks` random indices per step; test takes indices 0..num_tasks-1."""
    indices = train_indices(cfg, step, num_tasks) if split == "train" else list(range(num_tasks))
    return group_specs(indices, split, group_size)


def validation_specs(cfg: TrainConfig, step: int) -> list[EpisodeSpec]:
    """MIPU's fresh validation groups for step `step`: train tasks not in this step's training batch."""
    n_prompts = cfg.algo.mipu_val_prompts or cfg.rollout.prompts_per_step
    if n_prompts < 1 or cfg.rollout.group_size < 2:
        raise ValueError(f"MIPU validation needs algo.mipu_val_prompts ≥ 0 and rollout.group_size ≥ 2, got "
                         f"{cfg.algo.mipu_val_prompts} and {cfg.rollout.group_size}")
    training = set(train_indices(cfg, step, cfg.rollout.prompts_per_step))
    rng = random.Random(derive_seed("mipu-validation-tasks", cfg.seed, step))
    picked: list[int] = []
    while len(picked) < n_prompts:
        index = rng.choice(RL_TRAIN_INDICES)
        if index not in training and index not in picked:
            picked.append(index)
    return group_specs(picked, "train", cfg.rollout.group_size)
