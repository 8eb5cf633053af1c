"""evaluation/long_horizon.py: spikes against the run's median, collapse against its best so far, first steps."""

from __future__ import annotations

import math

import pytest

from evaluation.long_horizon import (
    COLLAPSE_DROP,
    ENVELOPE_BAND,
    GRAD_SPIKE_FACTOR,
    KL_SPIKE_FACTOR,
    SERIES,
    Events,
    collapses,
    excursions,
    first_reaching,
    pooled_counts,
    run_counts,
    spikes,
    step_series,
)


def test_spikes_are_steps_above_factor_times_the_runs_median():
    # median of (1, 1, 2, 1, 30, 1, 12) is 1, so the threshold is 10: steps 5 (30) and 7 (12) spike
    kl = list(enumerate([1.0, 1.0, 2.0, 1.0, 30.0, 1.0, 12.0], start=1))
    assert spikes(kl, 10.0) == Events(2, 5, (5, 7))


def test_a_value_at_exactly_the_threshold_is_no_spike():
    # median 2, threshold 5 × 2 = 10: 10 itself is not above it
    assert spikes([(1, 2.0), (2, 2.0), (3, 10.0)], 5.0) == Events(0, None, ())


def test_a_high_but_steady_series_has_no_spikes():
    # ten times another run's KL throughout is that run's own level, not a spike
    assert spikes([(s, 0.05 + 0.001 * s) for s in range(1, 201)], KL_SPIKE_FACTOR).count == 0


@pytest.mark.parametrize("series", [[], [(1, 0.0), (2, 0.0), (3, 1e-3)]])
def test_no_spikes_without_a_positive_median(series):
    assert spikes(series, KL_SPIKE_FACTOR) == Events(0, None, ())


def test_the_first_spike_is_the_earliest_step_not_the_largest():
    # median 1: step 3 (6) is above 5 × 1 before step 8's larger 50
    grad = [(s, 1.0) for s in range(1, 11) if s not in (3, 8)] + [(3, 6.0), (8, 50.0)]
    assert spikes(sorted(grad), GRAD_SPIKE_FACTOR) == Events(2, 3, (3, 8))


def test_collapse_is_more_than_20_points_below_the_best_so_far():
    # best so far: 0.5, 0.7, 0.7, 0.7, 0.8, 0.8; drops 0, 0, 0.1, 0.3, 0, 0.5 → steps 100 and 150 collapse
    success = [(25, 0.5), (50, 0.7), (75, 0.6), (100, 0.4), (125, 0.8), (150, 0.3)]
    assert collapses(success) == Events(2, 100, (100, 150))


def test_the_first_evaluation_at_or_above_the_target_is_where_a_run_reached_it():
    success = [(25, 0.3), (50, 0.61), (75, 0.8), (100, 0.7)]
    assert first_reaching(success, 0.7) == 75
    assert first_reaching(success, 0.3) == 25
    assert first_reaching([(25, 0.7 - 1e-12)], 0.7) == 25  # a float's last digit is not a miss
    assert first_reaching(success, 0.81) is None and first_reaching([], 0.1) is None


def test_an_early_low_evaluation_is_no_collapse():
    # 0.1 at step 25 is 0.8 below the run's final best, but nothing better came before it
    assert collapses([(25, 0.1), (50, 0.5), (75, 0.9)]) == Events(0, None, ())


def test_exactly_20_points_below_is_no_collapse():
    assert COLLAPSE_DROP == 0.20
    assert collapses([(2, 0.9), (4, 0.7)]).count == 0  # 0.9 − 0.7 = 0.20000000000000007 in floats
    assert collapses([(2, 0.9), (4, 0.69)]) == Events(1, 4, (4,))


def test_an_envelope_excursion_is_p2_below_half_or_p98_above_two():
    assert ENVELOPE_BAND == 2.0
    low = [(1, 0.74), (2, 0.5), (3, 0.49), (4, 0.9), (5, 1e-6)]
    high = [(1, 1.14), (2, 2.0), (3, 1.2), (4, 2.01), (5, 3.0)]
    # exactly at the band's edge (0.5, 2.0) is inside; a step out on both edges counts once
    assert excursions(low, high) == Events(3, 3, (3, 4, 5))
    assert excursions([], []) == Events(0, None, ())


def test_step_series_keeps_finite_numbers_one_per_step_in_order():
    records = [{"step": 2, "k": 3.0}, {"step": 1, "k": 1.0}, {"step": 3, "k": None}, {"step": 4, "k": math.nan},
               {"step": 5}, {"step": 6, "k": True}, {"step": 2, "k": 4.0}]
    assert step_series(records, "k") == [(1, 1.0), (2, 4.0)]


def _records(kl, grad, success=None):
    records = [{"step": s, SERIES["kl"]: k, SERIES["grad_norm"]: g, SERIES["update_kl"]: 1e-3}
               for s, (k, g) in enumerate(zip(kl, grad, strict=True), start=1)]
    for step, value in (success or {}).items():
        records[step - 1][SERIES["success"]] = value
    return records


def test_run_counts_reads_a_runs_metrics_records():
    # KL median 1e-3, threshold 1e-2: step 4 spikes; grad median 0.5, threshold 2.5: step 2 spikes
    records = _records([1e-3, 1e-3, 1e-3, 5e-2, 1e-3, 1e-3], [0.5, 3.0, 0.5, 0.5, 0.5, 0.4],
                       success={2: 0.6, 4: 0.7, 6: 0.45})
    counts = run_counts(records)
    assert counts.kl_spikes == Events(1, 4, (4,)) and counts.grad_norm_spikes == Events(1, 2, (2,))
    assert counts.update_kl_spikes.count == 0
    assert counts.collapse == Events(1, 6, (6,))  # 0.7 − 0.45 = 0.25
    assert counts.median_kl == pytest.approx(1e-3) and counts.median_grad_norm == pytest.approx(0.5)
    assert (counts.best_success, counts.final_success) == (0.7, 0.45)


def test_the_update_kl_has_its_median_and_its_largest_step():
    records = _records([1e-3] * 5, [0.5] * 5)
    for record, value in zip(records, [1e-10, 2e-3, 1e-9, 0.4, 3e-3], strict=True):
        record[SERIES["update_kl"]] = value
    counts = run_counts(records)
    assert counts.median_update_kl == pytest.approx(2e-3)
    assert counts.max_update_kl == (4, 0.4)
    assert counts.update_kl_spikes == Events(1, 4, (4,))  # 0.4 > 10 × 2e-3; 3e-3 is not


def test_the_envelopes_and_the_kl_have_their_extremes_with_their_steps():
    records = _records([1e-3, 0.3, 1e-3, 0.3], [0.5] * 4)
    for record, (p2, p98, byp) in zip(records, [(0.8, 1.1, 0.7), (0.4, 1.3, 1e-6), (0.4, 2.5, 0.9), (0.9, 1.0, 0.8)],
                                      strict=True):
        record |= {SERIES["loss_ratio_p2"]: p2, SERIES["loss_ratio_p98"]: p98, SERIES["r_byp_p2"]: byp}
    counts = run_counts(records)
    assert counts.envelope_excursions == Events(2, 2, (2, 3))
    assert counts.min_loss_ratio_p2 == (2, 0.4)  # the earliest of a tie
    assert counts.max_loss_ratio_p98 == (3, 2.5) and counts.min_r_byp_p2 == (2, 1e-6)
    assert counts.max_kl == (2, 0.3)


def test_a_run_without_the_keys_counts_nothing():
    counts = run_counts([{"step": 1, "rollout/reward": 0.5}])
    assert counts.kl_spikes == counts.collapse == Events(0, None, ())
    assert counts.median_kl is counts.best_success is counts.final_success is None
    assert counts.median_update_kl is counts.max_update_kl is None
    assert counts.envelope_excursions == Events(0, None, ()) and counts.max_kl is counts.min_loss_ratio_p2 is None


def test_pooled_counts_total_runs_with_and_earliest_first_step():
    quiet = run_counts(_records([1e-3] * 4, [0.5] * 4, success={2: 0.5, 4: 0.5}))
    spiky = run_counts(_records([1e-3, 1e-3, 1.0, 1.0, 1e-3, 1e-3, 1e-3], [0.5] * 7))  # steps 3 and 4
    late = run_counts(_records([1e-3] * 5 + [1.0], [0.5] * 6))  # step 6
    pooled = pooled_counts([quiet, spiky, late])
    assert pooled["kl_spikes"] == {"total": 3, "runs_with": 2, "runs": 3, "first_step": 3}
    assert pooled["collapse"] == {"total": 0, "runs_with": 0, "runs": 3, "first_step": None}
