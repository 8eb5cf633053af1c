"""Per-turn (segment) correction values: a turn is a run of sampled tokens between observations."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.config.algo_config import AlgoConfig
from trainer.config.errors import ConfigError
from trainer.objective.corrections import (
    compute_correction,
    correction_kwargs,
    correction_log_value,
    turn_segments,
)

# one row, two turns around an observation token (9.0 on it never counts); an empty row
MASK = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
DELTA = torch.tensor([[0.1, 0.2, 0.0, -0.3, 0.5], [0.0, 0.0, 0.0, 0.0, 0.0]])  # Δ_mis, 0 where m = 0


def test_turns_are_the_runs_of_sampled_tokens():
    assert turn_segments(MASK).tolist() == [[0, 0, -1, 1, 1], [-1, -1, -1, -1, -1]]


def test_turn_level_is_the_product_per_turn_and_turn_geo_its_mean():
    turn, _ = correction_log_value(DELTA, MASK, "turn")
    geo, _ = correction_log_value(DELTA, MASK, "turn_geo")
    seq, _ = correction_log_value(DELTA, MASK, "seq")
    assert turn[0].tolist() == pytest.approx([0.3, 0.3, 0.0, 0.2, 0.2])
    assert geo[0].tolist() == pytest.approx([0.15, 0.15, 0.0, 0.1, 0.1])
    assert seq[0, 0].item() == pytest.approx(0.5) and turn[1].abs().sum() == 0


def test_turn_level_masking_rejects_one_turn_and_keeps_the_other():
    old = torch.full((2, 5), -1.0)
    verl_mis = {"correction": "mis", "corr_upper": math.exp(0.25), "mis_semantics": "verl"}
    corr = compute_correction(old, old - DELTA, MASK, **correction_kwargs(AlgoConfig(corr_level="turn", **verl_mis)))
    assert corr.keep[0].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]  # turn 1's v = e^0.3 > e^0.25
    assert corr.weights[0, 3].item() == pytest.approx(math.exp(0.2), rel=1e-5)
    # at sequence level the whole episode goes (v = e^0.5)
    seq = compute_correction(old, old - DELTA, MASK, **correction_kwargs(AlgoConfig(corr_level="seq", **verl_mis)))
    assert seq.keep[0].sum() == 0


def test_corr_level_turn_is_a_config_value():
    from trainer.setup.build import build_config

    assert build_config(None, ["algo.correction=tis", "algo.corr_level=turn_geo"]).algo.corr_level == "turn_geo"
    with pytest.raises(ConfigError, match="corr_level"):
        build_config(None, ["algo.corr_level=episode"])
