"""verl's rejection by divergence (rollout_rs) on worked examples with distinct trainer and sampler log-probs."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_tir import SMALL

from trainer.config.algo_config import AlgoConfig
from trainer.config.errors import ConfigError
from trainer.loop import train
from trainer.objective.corrections import compute_correction, correction_kwargs
from trainer.objective.rejection import divergence_rejection, parse_rs
from trainer.runtime.logger import read_metrics
from trainer.setup.build import build_config

# ℓ = log π_train(θ_old) − log μ per token; 5.0 sits on padding, the last row is empty
DELTA = torch.tensor([[0.1, -0.05, 0.0], [0.8, 0.0, 0.0], [-0.3, -0.3, 5.0], [0.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])


def keep_of(options: str, thresholds: str) -> list[list[float]]:
    keep, _ = divergence_rejection(DELTA, MASK, parse_rs(options, thresholds))
    return keep.tolist()


def test_token_k2_rejects_tokens_whose_half_square_exceeds_the_bound():
    # ½ℓ²: 0.005, 0.00125 | 0.32, 0, 0 | 0.045, 0.045 → only row 1's first token is over 0.1
    assert keep_of("token_k2", "0.1") == [[1, 1, 0], [0, 1, 1], [1, 1, 0], [0, 0, 0]]
    _, metrics = divergence_rejection(DELTA, MASK, parse_rs("token_k2", "0.1"))
    assert metrics["rollout_corr/rollout_rs_token_k2_masked_fraction"] == pytest.approx(1 / 7)
    assert metrics["rollout_corr/rollout_rs_token_k2_seq_masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["rollout_corr/rs_masked_fraction"] == pytest.approx(1 / 7)


def test_token_k1_keeps_minus_log_ratio_between_the_log_bounds():
    # k1 = −ℓ within [log 0.5, log 2] = [−0.693, 0.693]: row 1's ℓ = 0.8 is the one token outside
    assert keep_of("token_k1", "0.5_2.0") == [[1, 1, 0], [0, 1, 1], [1, 1, 0], [0, 0, 0]]
    assert keep_of("token_k1", "2.0") == keep_of("token_k1", "0.5_2.0") == keep_of("token_k1", "0.5:2")  # L = 1/U


def test_sequence_levels():
    # seq_mean_k1 (geometric mean): mean(−ℓ) = −0.025 | −0.267 | 0.3 against ±log 1.25 = ±0.223
    assert keep_of("seq_mean_k1", "0.8_1.25") == [[1, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    # seq_sum_k1: Σ(−ℓ) = −0.05 | −0.8 | 0.6 against [log 0.5, log 2] = [−0.693, 0.693]
    assert keep_of("seq_sum_k1", "2.0") == [[1, 1, 0], [0, 0, 0], [1, 1, 0], [0, 0, 0]]
    # seq_max_k3: max(e^ℓ − 1 − ℓ) = 0.0052 | 0.4255 | 0.0408 against 0.05
    assert keep_of("seq_max_k3", "0.05") == [[1, 1, 0], [0, 0, 0], [1, 1, 0], [0, 0, 0]]
    # seq_sum_k3: Σ k3 = 0.0064 | 0.4255 | 0.0816 against 0.05
    assert keep_of("seq_sum_k3", "0.05") == [[1, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    k3 = math.exp(0.8) - 1.8  # the k3 of row 1's first token, by hand
    assert keep_of("seq_max_k3", f"{k3 + 1e-6}") == [[1, 1, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]]


def test_options_combine_with_and_and_take_one_threshold_each():
    assert keep_of("token_k2,seq_mean_k1", "0.1,0.8_1.25") == [[1, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert keep_of("token_k3,seq_max_k3", "0.05") == keep_of("seq_max_k3", "0.05")  # one shared threshold


def test_rejected_tokens_leave_the_loss_mask_whatever_the_correction():
    old = torch.full((4, 3), -1.0)
    algo = AlgoConfig(correction="tis", rollout_rs="token_k2", rollout_rs_threshold="0.1")
    corr = compute_correction(old, old - DELTA, MASK, **correction_kwargs(algo))
    assert corr.keep.tolist() == keep_of("token_k2", "0.1") and corr.weights[1, 0] == 0
    assert corr.metrics["rollout_corr/rollout_rs_token_k2_masked_fraction"] == pytest.approx(1 / 7)


@pytest.mark.parametrize(("options", "thresholds", "message"), [
    ("token_k4", "1", "unknown option"), ("token_k2", "0.5:1", "one positive upper bound"),
    ("token_k1", "2:0.5", "ratio bounds"), ("token_k2,seq_max_k3", "1,2,3", "one per option"),
    ("seq_max_k2", "-1", "one positive upper bound")])
def test_bad_specs_are_one_clear_error(options, thresholds, message):
    with pytest.raises(ValueError, match=message):
        parse_rs(options, thresholds)
    with pytest.raises(ConfigError, match=message):
        build_config(None, [f"algo.rollout_rs={options}", f"algo.rollout_rs_threshold={thresholds}"])


@pytest.mark.smoke
def test_a_run_with_rejection_trains_and_logs_its_fractions(tmp_path, sft_dir):
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=1",
                                      "algo.rollout_rs=token_k3,seq_mean_k1", "algo.rollout_rs_threshold=1e-6,0.999_1.001"])
    train(cfg, show_progress=False)
    rec = read_metrics(tmp_path)[0]
    assert 0 <= rec["rollout_corr/rs_masked_fraction"] <= 1 and math.isfinite(rec["loss/policy"])
    assert "rollout_corr/rollout_rs_seq_mean_k1_seq_masked_fraction" in rec


def test_icepop_preset_masks_the_ratio_outside_half_to_five_and_weights_by_it_inside():
    algo = build_config(None, ["algorithm=icepop"]).algo
    rho = torch.tensor([[0.3, 1.0, 2.0, 6.0]])  # π_train(θ_old)/μ per token
    old = torch.full((1, 4), -1.0)
    corr = compute_correction(old, old - rho.log(), torch.ones(1, 4), **correction_kwargs(algo))
    assert corr.weights.tolist()[0] == pytest.approx([0.0, 1.0, 2.0, 0.0], abs=1e-6)
    assert corr.keep.tolist() == [[1.0, 1.0, 1.0, 1.0]]  # masked tokens stay in the token-mean denominator
