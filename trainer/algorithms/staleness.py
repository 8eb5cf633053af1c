"""Per-token policy versions: how stale a step's sampled tokens are, and the bound on it
(`rollout.max_token_version_gap`).

Every sampled token records the policy version whose weights the engine held (`Trajectory.token_versions`: the
trainer's update count, lagged by `rollout.policy_lag` or the async producer's schedule). At step s the trainer
holds version s − 1, so a token's staleness is (s − 1) − its version: 0 for on-policy sampling, the lag under
`rollout.policy_lag` / `async_rollouts`. Metrics (over the step's sampled tokens): `rollout/token_staleness_mean`
and `_max`, `rollout/multi_version_frac` (episodes whose tokens come from more than one version), and, with the
bound on, `rollout/stale_masked_frac` (sampled tokens left out for it). The bound (AReaL's `max_token_version_gap`,
slime's `--mask-offpolicy-in-partial-rollout`): tokens more than `max_token_version_gap` versions old leave the
loss (`mask`), or their whole episode does (`drop_episode`); 0 turns it off. Both happen before the batch is
built, so advantages still count every episode (a masked token only stops carrying gradient).
"""

from __future__ import annotations

from agents.trajectory import Trajectory

STALE_POLICIES = ("mask", "drop_episode")


def staleness_metrics(trajs: list[Trajectory], current: int) -> dict[str, float]:
    """`rollout/token_staleness_{mean,max}` and `rollout/multi_version_frac` of the episodes' sampled tokens at
    trainer version `current` (nothing for episodes that recorded no versions)."""
    gaps, multi, counted = [], 0, 0
    for t in trajs:
        versions = {v for trace in t.traces for m, v in zip(trace.loss_mask, trace.token_versions, strict=False)
                    if m}
        if not versions:
            continue
        counted += 1
        multi += len(versions) > 1
        gaps += [current - v for trace in t.traces
                 for m, v in zip(trace.loss_mask, trace.token_versions, strict=False) if m]
    if not gaps:
        return {}
    return {"rollout/token_staleness_mean": sum(gaps) / len(gaps), "rollout/token_staleness_max": float(max(gaps)),
            "rollout/multi_version_frac": multi / counted}


def mask_stale_tokens(trajs: list[Trajectory], current: int, max_gap: int, policy: str) -> dict[str, float]:
    """Apply the bound (module docstring); returns `rollout/stale_masked_frac`, nothing with the bound off."""
    if policy not in STALE_POLICIES:
        raise ValueError(f"rollout.stale_token_policy={policy!r}: use one of {', '.join(STALE_POLICIES)}")
    if max_gap <= 0:
        return {}
    masked = sampled = 0
    for t in trajs:
        if policy == "drop_episode":
            tokens = [(m, v) for trace in t.traces for m, v in zip(trace.loss_mask, trace.token_versions,
                                                                    strict=False) if m]
            sampled += len(tokens)
            if any(current - v > max_gap for _, v in tokens):
                masked += len(tokens)
                t.mask_out("stale_tokens")
            continue
        n_masked, n_sampled = t.mask_stale(current, max_gap)
        masked, sampled = masked + n_masked, sampled + n_sampled
    return {"rollout/stale_masked_frac": masked / max(sampled, 1)}
