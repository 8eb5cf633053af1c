"""DAPO's three rollout-side changes (arXiv 2503.14476 §3.2–3.4; verl's filter_groups and overlong buffer).

- Dynamic sampling (`algo.dynamic_sampling`): a group whose rewards are all equal has zero advantage and only
  dilutes the batch. Such groups are dropped and more prompts are sampled, round by round (at most
  `algo.dynamic_max_rounds` rounds in all), until the step has `rollout.prompts_per_step` informative groups;
  the batch keeps the first that many (verl keeps the first train_batch_size). When the rounds run out,
  zero-variance groups fill the rest of the batch (no gradient from them; verl raises instead) and
  `dapo/groups_kept` says how many informative groups the step had. Refill prompts are drawn
  from (seed, step, round) only and never repeat a prompt of the step, so a resumed run replays them. A group's
  rewards are its advantage members' (`rollout.infra_failures`, trainer/objective/infra_failures.py): under
  exclude, an outage's 0 does not make a group of 1s informative, and a group left without two valid members is
  not. Under data
  parallelism each rank fills its own share (prompts_per_step / N groups) from the train prompts ≡ rank (mod N),
  so ranks never refill with the same prompt and every rank ends with the same batch size.
- Overlong filtering (`algo.overlong_filter`): an episode that ran into the response budget
  (`info["budget_exhausted"]`, or `rollout.max_response_tokens` response tokens) is left out of the loss
  (`Trajectory.mask_out`: mask and rollout log-probs zeroed, `info["loss_masked"]`); its reward still counts in its
  group's advantage baseline, as in verl.
- Soft overlong punishment (`algo.overlong_buffer` = L_cache > 0): with L the episode's response length and
  L_max = `rollout.max_response_tokens`, the reward gains min(0, (L_max − L_cache − L) / L_cache) ×
  `algo.overlong_penalty`: 0 up to L_max − L_cache, then linear down to −penalty at L_max (DAPO eq. 13).

Legend: G prompts a step, K = rollout.group_size episodes each.
"""

from __future__ import annotations

import random
import statistics

from agents.rollout import EpisodeSpec
from agents.trajectory import Trajectory
from envs.splits import RL_TRAIN_INDICES, derive_seed
from trainer.config.train_config import TrainConfig
from trainer.objective.infra_failures import Run, advantage_members
from trainer.tasks import dataset_train_size, group_specs


def informative(group: list[Trajectory], infra_failures: str) -> bool:
    """Whether the rewards of the group's advantage members differ (a zero-variance group has zero advantage
    everywhere); `infra_failures` is `rollout.infra_failures`."""
    members = advantage_members(group, infra_failures)
    return len({t.reward for t, counts in zip(group, members, strict=True) if counts}) > 1


def refill_indices(cfg: TrainConfig, step: int, round_: int, used: set[int], n: int, rank: int = 0,
                   world: int = 1) -> list[int]:
    """`n` train prompts for refill round `round_` of `step`, none of them in `used` (fewer if none are left); on
    rank r of N, only prompts ≡ r (mod N) of the pool."""
    size = dataset_train_size(cfg)
    pool = range(size) if size is not None else RL_TRAIN_INDICES
    rest = [i for j, i in enumerate(pool) if i not in used and j % world == rank]
    key = (cfg.seed, step, round_) if world == 1 else (cfg.seed, step, round_, rank, world)
    return random.Random(derive_seed("dapo-refill", *key)).sample(rest, min(n, len(rest)))


def collect_dynamic(cfg: TrainConfig, step: int, first: list[EpisodeSpec], run: Run, seed: int, rank: int = 0,
                    world: int = 1, step_indices: set[int] | None = None) -> tuple[list[Trajectory], dict[str, float]]:
    """The step's rollouts with zero-variance groups dropped and refilled (module docstring): `first` is this
    rank's share, `step_indices` every prompt of the step on all ranks (default: those of `first`)."""
    want, k = cfg.rollout.prompts_per_step // world, cfg.rollout.group_size
    kept: list[list[Trajectory]] = []
    flat: list[list[Trajectory]] = []  # zero-variance groups, in case the rounds run out
    used = set(step_indices) if step_indices is not None else {s.options["index"] for s in first}
    specs, rounds = first, 0
    while specs:
        rounds += 1
        trajs = run(specs, derive_seed("dapo-round", seed, rounds - 1) if rounds > 1 else seed)
        groups: dict[int, list[Trajectory]] = {}
        for t in trajs:
            groups.setdefault(t.group_id, []).append(t)
        for group in groups.values():
            (kept if informative(group, cfg.rollout.infra_failures) else flat).append(group)
        if len(kept) >= want or rounds >= cfg.algo.dynamic_max_rounds:
            break
        indices = refill_indices(cfg, step, rounds, used, want - len(kept), rank, world)
        used.update(indices)
        specs = group_specs(indices, "train", k)
    informative_groups = min(len(kept), want)
    # Short of informative groups: zero-variance ones fill the batch (their advantage is 0, they add no policy
    # gradient), so every step keeps its size and a run never stops on a hard batch.
    batch = (kept + flat)[:want]
    out: list[Trajectory] = []
    for g, group in enumerate(batch):  # group ids 0..G-1 again, in the order kept
        for t in group:
            t.regroup(g)
            out.append(t)
    return out, {"dapo/rounds": float(rounds), "dapo/groups_dropped": float(len(flat)),
                 "dapo/groups_kept": float(informative_groups)}


def overlong_shaping(cfg: TrainConfig, trajs: list[Trajectory]) -> dict[str, float]:
    """Apply the overlong filter and the soft punishment to `trajs` in place; their metrics."""
    a, limit = cfg.algo, cfg.rollout.max_response_tokens
    penalties = []
    for t in trajs:
        if a.overlong_buffer > 0:
            excess = len(t.response_ids) - (limit - a.overlong_buffer)
            penalty = -a.overlong_penalty * min(max(excess, 0) / a.overlong_buffer, 1.0)
            t.shape_reward(penalty, "overlong")
            penalties.append(penalty)
        if a.overlong_filter and overlong(t, limit):
            t.mask_out("overlong")
    metrics = {}
    if a.overlong_buffer > 0:
        metrics["dapo/overlong_penalty"] = statistics.fmean(penalties)
    if a.overlong_filter:
        metrics["dapo/overlong_filtered"] = statistics.fmean(float(overlong(t, limit)) for t in trajs)
    return metrics


def overlong(t: Trajectory, limit: int) -> bool:
    """Whether the episode ran into the response budget (ended on it, whichever turn filled it)."""
    return bool(t.info.get("budget_exhausted")) or len(t.response_ids) >= limit
