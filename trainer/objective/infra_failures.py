"""What the trainer makes of episodes whose outcome is not the policy's (`rollout.infra_failures`).

The rollout marks them (`Trajectory.infra_failure`: a sandbox error after the client's retries, an engine error, a
context the policy did not fill, the rollout call's timeout; agents/rollout.py says which is which) with reward 0
and out of the loss, under every policy. What differs is their place in their group:

- exclude (default): out of their group's advantage statistics too (mean, std, leave-one-out baseline; GiGPO's
  step groups; DAPO's informative test; QUATRO's per-query duals), so the other members' advantages are what they
  would be had the episode never run. A group left with fewer than two valid members has no baseline: it
  contributes nothing, its lone member leaves the loss as well (`masked_by` "infra_lone_member").
- resample: each failed episode is played again (the same task, fresh sampling seeds), up to `RESAMPLE_ROUNDS`
  times, in place, so the group keeps its size; what still fails is excluded as above.
- zero: they keep their reward-0 place in their group, as alprl did for sandbox errors before and as most
  trainers do. That zero is fake: a group [1, 0, 0] whose last 0 is an outage gives the real 0 an advantage of
  −0.58 instead of −0.71 (unbiased std) and the 1 +1.15 instead of +0.71.

`advantage_members` is the one place that decides who counts; every consumer (the advantage stage in
trainer/loop.py, GiGPO, QUATRO, DAPO's filter) asks it, so they cannot disagree. Counted per step:
`rollout/infra_failures/<reason>` (marked episodes, any policy), `rollout/infra_frac` (their share of the step's
episodes, which `rollout.max_infra_frac` bounds), `rollout/infra_excluded` (of them, those left out
of their group's statistics), `rollout/infra_excluded_groups` (groups left without a baseline),
`rollout/infra_resampled` (episodes played again). A step whose every episode failed on the engine raises: that
is the engine, not a request.

Elsewhere (docs/architecture.md, "Infrastructure failures"): open-instruct keeps a failed tool call's error text as
the observation and the sample in its full group (optionally reward 0), verl likewise (its GRPO normalizes over
every sample of a uid); both behave like `zero`, and train on the tokens after the error too.

Legend: B episodes of a step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from agents.rollout import EpisodeSpec
from agents.trajectory import INFRA_FAILURE_REASONS, Trajectory
from envs.splits import derive_seed
from trainer.config.rollout_config import INFRA_FAILURE_POLICIES

RESAMPLE_ROUNDS = 2
"""Tries `resample` gives a failed episode after the first: a persistent outage costs at most this many more
rollout calls of the failed episodes (each bounded by the sandbox client's `env.sandbox_retry_s`) before the
episodes are excluded and `rollout.infra_patience` takes over."""

Run = Callable[[list[EpisodeSpec], int], list[Trajectory]]  # (specs, sampling seed) → trajectories, in order


def advantage_members(trajs: list[Trajectory], policy: str) -> list[bool]:
    """Which episodes count in their group's advantage statistics, (B,): under `zero` all; else those the
    infrastructure did not fail, and of those only the ones whose group keeps at least two."""
    if policy not in INFRA_FAILURE_POLICIES:
        raise ValueError(f"rollout.infra_failures={policy!r}; valid: {', '.join(INFRA_FAILURE_POLICIES)}")
    if policy == "zero":
        return [True] * len(trajs)
    valid = [t.infra_failure is None for t in trajs]
    counts = Counter(t.group_id for t, ok in zip(trajs, valid, strict=True) if ok)
    return [ok and counts[t.group_id] >= 2 for t, ok in zip(trajs, valid, strict=True)]


def resampling(run: Run, rounds: int = RESAMPLE_ROUNDS) -> Run:
    """`run`, with each episode the infrastructure failed played again in its place (same spec, the call's seed
    derived per round), at most `rounds` times; a replacement's `info["resampled"]` counts the tries it took."""

    def run_resampling(specs: list[EpisodeSpec], seed: int) -> list[Trajectory]:
        trajs = run(specs, seed)
        for r in range(1, rounds + 1):
            failed = [i for i, t in enumerate(trajs) if t.infra_failure is not None]
            if not failed:
                break
            again = run([specs[i] for i in failed], derive_seed("infra-resample", seed, r))
            for i, t in zip(failed, again, strict=True):
                t.info["resampled"] = r
                trajs[i] = t
        return trajs

    return run_resampling


def settle_infra_failures(trajs: list[Trajectory], policy: str) -> dict[str, float]:
    """Before the batch is built: the lone valid member of a group left without a baseline leaves the loss
    (not under `zero`, where no group loses members); a step whose every episode failed on the engine raises;
    the step's `rollout/infra_*` counts."""
    if trajs and all(t.infra_failure == "engine_error" for t in trajs):
        raise RuntimeError(f"the engine failed every request of the step ({trajs[0].info['engine_error']}); "
                           "an engine that fails everything is broken, not flaky: check its log")
    members = advantage_members(trajs, policy)
    for t, member in zip(trajs, members, strict=True):
        if not member and t.infra_failure is None and not t.info.get("loss_masked"):  # its group has no other
            t.mask_out("infra_lone_member")
    empty_groups = {t.group_id for t in trajs} - {t.group_id for t, m in zip(trajs, members, strict=True) if m}
    reasons = Counter(t.infra_failure for t in trajs if t.infra_failure is not None)
    metrics = {f"rollout/infra_failures/{r}": float(reasons[r]) for r in INFRA_FAILURE_REASONS}
    metrics["rollout/infra_frac"] = sum(reasons.values()) / len(trajs) if trajs else 0.0  # trainer/runtime/outage.py
    metrics["rollout/infra_excluded"] = float(sum(reasons.values())) if policy != "zero" else 0.0
    metrics["rollout/infra_excluded_groups"] = float(len(empty_groups))
    metrics["rollout/infra_resampled"] = float(sum(t.info.get("resampled", 0) for t in trajs))
    return metrics
