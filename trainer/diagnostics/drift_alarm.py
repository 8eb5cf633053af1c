"""A drift alarm on the sampler-vs-trainer mismatch KL: a slow rise is what a broken weight transfer looks like.

A sync bug that corrupts a little more each step (a transfer path that drops or reorders part of a tensor, a cache
that is not refreshed) does not fail one step: the mismatch KL creeps up while the reward still moves. Every step
the alarm fits a least-squares line to the last `window` values of the KL (`rollout_corr/k3_kl`, non-negative per
token, so its mean has no sign noise) and calls its rise over the window, slope × (window − 1), the trend; a trend
above `bound` raises the alarm: `rollout_corr/drift_alarm` = 1 that step and one warning line naming the step,
the trend and the window's first and last KL. A flat series whose noise stays well under the bound stays quiet:
the fitted rise's noise is about the per-step noise (σ·√(12/(n(n+1)))·(n − 1) ≈ 1.1σ at n = 8).

`rollout_corr/kl_trend` is logged every step once the window is full (0 before). State lives in memory: a resumed
run fills its window again before the alarm can fire.
"""

from __future__ import annotations

from collections import deque

DRIFT_KL_KEY = "rollout_corr/k3_kl"
"""The mismatch KL the alarm watches (trainer/diagnostics/mismatch_metrics.py)."""


def fitted_rise(values: list[float]) -> float:
    """The rise of the least-squares line through `values` (at steps 0..n−1) from its first to its last step."""
    n = len(values)
    if n < 2:
        return 0.0
    x_mean, y_mean = (n - 1) / 2, sum(values) / n
    sxx = sum((i - x_mean) ** 2 for i in range(n))
    sxy = sum((i - x_mean) * (y - y_mean) for i, y in enumerate(values))
    return sxy / sxx * (n - 1)


class DriftAlarm:
    """Watches one KL series step by step; `window` 0 switches it off (`update` returns nothing)."""

    def __init__(self, window: int, bound: float):
        self.window, self.bound = window, bound
        self.values: deque[float] = deque(maxlen=max(window, 1))

    def update(self, step: int, metrics: dict[str, float]) -> tuple[dict[str, float], str | None]:
        """Add the step's KL from its `metrics` (absent: nothing to watch this step); returns
        (`rollout_corr/kl_trend`, `rollout_corr/drift_alarm`) and the warning line when the alarm fires."""
        if self.window < 2 or DRIFT_KL_KEY not in metrics:
            return {}, None
        self.values.append(float(metrics[DRIFT_KL_KEY]))
        if len(self.values) < self.window:
            return {"rollout_corr/kl_trend": 0.0, "rollout_corr/drift_alarm": 0.0}, None
        rise = fitted_rise(list(self.values))
        alarm = rise > self.bound
        out = {"rollout_corr/kl_trend": rise, "rollout_corr/drift_alarm": float(alarm)}
        if not alarm:
            return out, None
        return out, (f"step {step}: the sampler-vs-trainer KL ({DRIFT_KL_KEY}) rose {rise:.4f} over the last "
                     f"{self.window} steps ({self.values[0]:.4f} -> {self.values[-1]:.4f}), over the drift bound "
                     f"{self.bound} (diagnostics.drift_bound): check the weight sync (rollout/weight_sync_ok) and "
                     "`alprl diagnose` the run")
