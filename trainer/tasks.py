"""Task selection: which task each episode of a step plays, and the limits every rollout runs under.

Everything here derives only from (seed, split, step), so a resumed run replays the same tasks. Index ranges
come from `envs/splits.py`: RL trains on `RL_TRAIN_INDICES`, evaluates on the test split's first indices, and
MIPU validates on other train indices than the step's own.

With `env.dataset` the train split is the file's problems, indexed 0..n-1 (`envs/tir/problems.py`), and steps
go through it in epochs as verl's dataloader does (shuffle per epoch, `drop_last`): epoch e is a permutation
seeded by `derive_seed("dataset-epoch", seed, e)`, step s takes its next `prompts_per_step` problems, and the
n mod prompts_per_step left at an epoch's end are skipped that epoch. So every problem is played at most once
per epoch (exactly once when prompts_per_step divides n) and a step's problems are distinct. MIPU's validation
groups are problems of the file outside the step's batch; evaluation takes test problems 0..eval_tasks-1.
"""

from __future__ import annotations

import random

from agents.env_families import problem_count
from agents.rollout import EpisodeSpec, RolloutLimits
from agents.templates.history import HistoryPolicy
from envs.splits import RL_TRAIN_INDICES, derive_seed
from trainer.config.train_config import TrainConfig


def rollout_limits(cfg: TrainConfig) -> RolloutLimits:
    r = cfg.rollout
    e = cfg.env
    return RolloutLimits(r.max_new_tokens, r.max_response_tokens, r.max_obs_tokens,
                         episode_timeout_s=r.episode_timeout_s, mask_void_turns=e.mask_void_turns,
                         stop_token_ids=list(r.stop_token_ids),
                         history=HistoryPolicy(e.think_history, e.context, e.context_budget, e.summarizer))


def group_specs(indices: list[int], split: str, group_size: int) -> list[EpisodeSpec]:
    """`group_size` episodes of each task index, one GRPO group per index."""
    return [EpisodeSpec(seed=index, options={"split": split, "index": index}, group_id=g)
            for g, index in enumerate(indices) for _ in range(group_size)]


def dataset_train_size(cfg: TrainConfig) -> int | None:
    """Problems in the train split when a dataset file serves it; None when train tasks are generated."""
    return problem_count(cfg.env, "train") if cfg.env.dataset else None


def epoch_indices(seed: int, step: int, num_tasks: int, size: int) -> list[int]:
    """The `num_tasks` problem positions (of `size`) of 1-based step `step`, epoch by epoch (module docstring)."""
    per_epoch = size // num_tasks
    if per_epoch < 1:
        raise ValueError(f"a step takes {num_tasks} distinct problems, but the train split has only {size}")
    epoch, batch = divmod(step - 1, per_epoch)
    order = list(range(size))
    random.Random(derive_seed("dataset-epoch", seed, epoch)).shuffle(order)
    return order[batch * num_tasks: (batch + 1) * num_tasks]


def train_indices(cfg: TrainConfig, step: int, num_tasks: int) -> list[int]:
    """The train tasks of step `step`: `num_tasks` distinct indices of `RL_TRAIN_INDICES`, or of the dataset."""
    size = dataset_train_size(cfg)
    if size is not None:
        return epoch_indices(cfg.seed, step, num_tasks, size)
    return random.Random(derive_seed("train-tasks", cfg.seed, step)).sample(RL_TRAIN_INDICES, num_tasks)


def episode_specs(cfg: TrainConfig, split: str, step: int, num_tasks: int, group_size: int) -> list[EpisodeSpec]:
    """Tasks of one batch: train draws `num_tasks` indices per step; test takes indices 0..num_tasks-1."""
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
    size = dataset_train_size(cfg)
    if size is not None:
        rest = [i for i in range(size) if i not in training]
        if len(rest) < n_prompts:
            raise ValueError(f"MIPU validation needs {n_prompts} train problems outside the step's batch; the "
                             f"dataset's train split has {len(rest)} more")
        return group_specs(rng.sample(rest, n_prompts), "train", cfg.rollout.group_size)
    picked: list[int] = []
    while len(picked) < n_prompts:
        index = rng.choice(RL_TRAIN_INDICES)
        if index not in training and index not in picked:
            picked.append(index)
    return group_specs(picked, "train", cfg.rollout.group_size)
