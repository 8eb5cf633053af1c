"""The drift alarm: a slow corruption series fires it within a few steps; a flat noisy one never does."""

import random

import pytest

from trainer.config.train_config import DiagnosticsConfig
from trainer.diagnostics.drift_alarm import DRIFT_KL_KEY, DriftAlarm, fitted_rise


def _run(series, window=None, bound=None):
    d = DiagnosticsConfig()
    alarm = DriftAlarm(d.drift_window if window is None else window, d.drift_bound if bound is None else bound)
    fired, warnings = [], []
    for step, kl in enumerate(series, start=1):
        metrics, warning = alarm.update(step, {DRIFT_KL_KEY: kl})
        if metrics.get("rollout_corr/drift_alarm"):
            fired.append(step)
            warnings.append(warning)
    return fired, warnings


def test_fitted_rise_hand_computed():
    # y = 0.001·x over 5 steps: slope 0.001, rise over the window 0.001 · 4 = 0.004
    assert fitted_rise([0.0, 0.001, 0.002, 0.003, 0.004]) == pytest.approx(0.004)
    assert fitted_rise([0.3, 0.3, 0.3]) == pytest.approx(0.0)
    assert fitted_rise([0.1]) == 0.0


def test_slow_corruption_fires_within_the_window():
    # prime-rl's NIXL drift: KL 0.002 → 0.035 in 16 steps (≈ 0.002 a step), after 20 clean steps; noise σ = 0.0003
    rng = random.Random(0)
    clean = [0.002 + rng.gauss(0, 0.0003) for _ in range(20)]
    drift = [0.002 + 0.002 * k + rng.gauss(0, 0.0003) for k in range(1, 17)]
    fired, warnings = _run(clean + drift)
    window = DiagnosticsConfig().drift_window
    assert fired, "the alarm never fired on a slow corruption"
    assert 21 <= fired[0] <= 20 + window, f"fired at step {fired[0]}, not within {window} steps of the drift's start"
    assert f"step {fired[0]}" in warnings[0] and "diagnostics.drift_bound" in warnings[0]


def test_flat_noisy_series_stays_quiet():
    # a healthy bf16 run: KL ≈ 0.002 with 25% noise, over 500 steps
    rng = random.Random(1)
    fired, _ = _run([max(0.0, 0.002 + rng.gauss(0, 0.0005)) for _ in range(500)])
    assert fired == []


def test_off_and_missing_kl():
    assert DriftAlarm(0, 0.005).update(1, {DRIFT_KL_KEY: 1.0}) == ({}, None)
    assert DriftAlarm(8, 0.005).update(1, {}) == ({}, None)
