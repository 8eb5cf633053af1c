"""Rollout–training mismatch diagnostics: hand-computed values, masking, sampling, reward split."""

import math

import pytest
import torch

from trainer.diagnostics.mismatch_metrics import (
    distribution_stats,
    metric_generator,
    mismatch_diagnostics,
    perturbation_prob_shift,
)

LN = math.log


def _two_rows():
    # row 0: old = [ln .5, ln .25], rollout = [ln .25, ln .25] → Δ = [ln 2, 0]
    # row 1: old = [ln .5, (tool token)], rollout = [ln .5, 0.0 filler] → Δ = [0]
    old = torch.tensor([[LN(0.5), LN(0.25)], [LN(0.5), -7.0]])
    rollout = torch.tensor([[LN(0.25), LN(0.25)], [LN(0.5), 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    return old, rollout, mask


def test_offpolicy_metrics_hand_computed():
    old, rollout, mask = _two_rows()
    out = mismatch_diagnostics(old, rollout, mask, torch.tensor([1.0, 0.0]), step=1)
    # kl = mean_m(rollout − old) = (−ln 2 + 0 + 0) / 3
    assert out["rollout_corr/kl"] == pytest.approx(-LN(2) / 3)
    # k3 = mean_m(e^Δ − Δ − 1) = (2 − ln 2 − 1) / 3
    assert out["rollout_corr/k3_kl"] == pytest.approx((1 - LN(2)) / 3)
    # training ppl per row: exp(−mean old) = exp(−(ln .5 + ln .25)/2) = √8, exp(−ln .5) = 2 → mean (√8 + 2)/2
    assert out["rollout_corr/training_ppl"] == pytest.approx((8**0.5 + 2) / 2)
    # rollout ppl: row 0 exp(−ln .25) = 4, row 1 = 2 → 3
    assert out["rollout_corr/rollout_ppl"] == pytest.approx(3.0)
    # log_ppl_diff per row = mean rollout − mean old: row 0 (ln .25 − (ln .5 + ln .25)/2) = −ln2/2, row 1 0
    assert out["rollout_corr/log_ppl_diff"] == pytest.approx(-LN(2) / 4)
    assert out["rollout_corr/log_ppl_diff_min"] == pytest.approx(-LN(2) / 2)
    assert out["rollout_corr/ppl_ratio"] == pytest.approx((2**-0.5 + 1) / 2)
    # chi2_token = mean_m(e^{2Δ}) − 1 = (4 + 1 + 1)/3 − 1 = 1; chi2_seq = mean_b e^{2 S_b} − 1 = (4 + 1)/2 − 1
    assert out["rollout_corr/chi2_token"] == pytest.approx(1.0)
    assert out["rollout_corr/chi2_seq"] == pytest.approx(1.5)
    # |Δp| over valid tokens: [.25, 0, 0] → mean 1/12, max .25
    assert out["training/rollout_probs_diff_mean"] == pytest.approx(0.25 / 3)
    assert out["training/rollout_probs_diff_max"] == pytest.approx(0.25)
    # reward split: row 0 is positive, row 1 negative
    assert out["rollout_corr/positive_kl"] == pytest.approx(-LN(2) / 2)
    assert out["rollout_corr/negative_kl"] == pytest.approx(0.0)
    # token ratios [2, 1, 1]; seq ratios [2, 1]: per-seq mean 1.5, token-weighted (2·2 + 1·1)/3 = 5/3
    assert out["ratio/mis_token/max"] == pytest.approx(2.0)
    assert out["ratio/mis_seq/mean"] == pytest.approx(1.5)
    assert out["ratio/mis_seq_tokw/mean"] == pytest.approx(5 / 3)
    assert out["ratio/mis_geo/max"] == pytest.approx(2**0.5)


def test_tool_tokens_never_enter_the_metrics():
    old, rollout, mask = _two_rows()
    base = mismatch_diagnostics(old, rollout, mask, None, step=1)
    old2, rollout2 = old.clone(), rollout.clone()
    old2[1, 1], rollout2[1, 1] = -30.0, float("nan")  # garbage on the masked tool token
    assert mismatch_diagnostics(old2, rollout2, mask, None, step=1) == base
    assert base["rollout_corr/nonfinite_tokens"] == 0.0


def test_nonfinite_valid_tokens_are_counted_and_skipped():
    old, rollout, mask = _two_rows()
    rollout[0, 1] = float("-inf")
    out = mismatch_diagnostics(old, rollout, mask, None, step=1)
    assert out["rollout_corr/nonfinite_tokens"] == 1.0 and out["rollout_corr/valid_tokens"] == 2.0
    assert all(math.isfinite(v) for v in out.values())


def test_quantiles_sampled_deterministically_and_bounded():
    values = torch.linspace(0.0, 1.0, 200_001)
    a = distribution_stats(values, generator=metric_generator(3, 0, "x"), max_samples=4096)
    b = distribution_stats(values, generator=metric_generator(3, 0, "x"), max_samples=4096)
    c = distribution_stats(values, generator=metric_generator(4, 0, "x"), max_samples=4096)
    assert a == b and a["p50"] != c["p50"]
    for q in ("p02", "p25", "p50", "p98"):  # uniform on [0, 1]: quantile ≈ q within sampling error
        assert a[q] == pytest.approx(int(q[1:]) / 100, abs=0.03)
    assert a["min"] == 0.0 and a["max"] == 1.0  # exact, not sampled


def test_token_weighting_equals_repetition():
    values = torch.tensor([0.5, 2.0, 8.0])
    counts = torch.tensor([3, 1, 2])
    gen = metric_generator(0, 0, "w")
    weighted = distribution_stats(values, counts, generator=gen)
    repeated = distribution_stats(values.repeat_interleave(counts), generator=metric_generator(0, 0, "w"))
    assert weighted == pytest.approx(repeated)


def test_pearson_and_probability_bins():
    # p_tr = [.9, .5, .0005], p_ro = [.95, .4, .002]: three tokens in three bins
    old = torch.tensor([[LN(0.9), LN(0.5), LN(0.0005)]])
    rollout = torch.tensor([[LN(0.95), LN(0.4), LN(0.002)]])
    out = mismatch_diagnostics(old, rollout, torch.ones(1, 3), None, step=0)
    expected_r = torch.corrcoef(torch.tensor([[0.9, 0.5, 0.0005], [0.95, 0.4, 0.002]], dtype=torch.float64))[0, 1]
    assert out["training/rollout_actor_probs_pearson_corr"] == pytest.approx(expected_r.item())
    # bin [0.9, 1]: one token with r = .9/.95; bin [0.1, 0.5): r = .5/.4; bin [1e-3, 1e-2): r = .25
    assert out["ratio/mis_token/bin_ge0.9/p98"] == pytest.approx(0.9 / 0.95)
    assert out["ratio/mis_token/bin_0.1_0.5/p02"] == pytest.approx(1.25)
    assert out["ratio/mis_token/bin_1e-3_1e-2/frac"] == pytest.approx(1 / 3)
    assert "ratio/mis_token/bin_lt1e-3/p02" not in out  # empty bins are omitted


def test_envelope_and_ess():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 50, generator=g) * 3
    near = mismatch_diagnostics(old, old + 0.01 * torch.randn(8, 50, generator=g), torch.ones(8, 50), None, step=0)
    far = mismatch_diagnostics(old, old + 0.5 * torch.randn(8, 50, generator=g), torch.ones(8, 50), None, step=0)
    assert 0 < near["ratio/mis_token/envelope"] < far["ratio/mis_token/envelope"]
    assert near["ratio/mis_token/log_envelope"] == pytest.approx(
        math.log(near["ratio/mis_token/p98"]) - math.log(near["ratio/mis_token/p02"]))
    assert far["ratio/mis_token/ess_kish"] < near["ratio/mis_token/ess_kish"] <= 1.0


def test_perturbation_prob_shift():
    # |e^{ln .6} − e^{ln .5}| = .1 and |.2 − .2| = 0 → mean .05; masked token ignored
    logp = torch.tensor([[LN(0.6), LN(0.2), 0.0]])
    old = torch.tensor([[LN(0.5), LN(0.2), -9.0]])
    out = perturbation_prob_shift(logp, old, torch.tensor([[1.0, 1.0, 0.0]]), step=0)
    assert out["perturb/delta_p_mean"] == pytest.approx(0.05)
    assert out["perturb/delta_p_p75"] == pytest.approx(0.075)


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="shapes differ"):
        mismatch_diagnostics(torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3), None, step=0)
    with pytest.raises(ValueError, match="rewards shape"):
        mismatch_diagnostics(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(3), step=0)
