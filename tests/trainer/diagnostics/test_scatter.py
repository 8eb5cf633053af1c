"""trainer/diagnostics/scatter.py: which steps save a sample, the sample's size and seeding, the .npz on disk and its r."""

import math

import numpy as np
import pytest
import torch

from trainer.diagnostics.scatter import is_periodic_step, pearson_r, save_scatter, scatter_sample


def test_scatter_steps_are_first_last_and_every_nth():
    assert [s for s in range(1, 26) if is_periodic_step(s, 10, 1, 25)] == [1, 10, 20, 25]
    assert [s for s in range(1, 26) if is_periodic_step(s, 0, 1, 25)] == [1, 25]


def test_sample_keeps_masked_finite_tokens_only():
    old = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.2, 0.3]]))
    roll = torch.log(torch.tensor([[0.4, 0.25, 0.8], [0.2, 0.1, 0.3]]))
    roll[1, 2] = -math.inf  # a token the engine reported no log-prob for: left out
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    train_p, rollout_p = scatter_sample(old, roll, mask, seed=0, max_points=100)
    assert train_p.tolist() == pytest.approx([0.5, 0.25, 0.1, 0.2])
    assert rollout_p.tolist() == pytest.approx([0.4, 0.25, 0.2, 0.1])


def test_sample_is_fixed_size_and_seeded(tmp_path):
    gen = torch.Generator().manual_seed(0)
    old = torch.rand(64, 500, generator=gen).clamp_min(1e-3).log()  # (B, T): 32,000 tokens
    roll = (old.exp() * 0.9 + 0.05).log()  # μ = 0.9 π + 0.05: r = 1 exactly
    mask = torch.ones_like(old)
    a = save_scatter(tmp_path, 3, old, roll, mask, seed=7, max_points=20000)
    first = np.load(tmp_path / "diagnostics" / "scatter_step_3.npz")
    train_p, rollout_p = first["train_p"], first["rollout_p"]
    assert len(train_p) == len(rollout_p) == 20000
    assert a["diag/scatter_pearson_r"] == pytest.approx(1.0, abs=1e-5)
    save_scatter(tmp_path, 3, old, roll, mask, seed=7, max_points=20000)  # a resumed run rewrites the same file
    assert np.array_equal(np.load(tmp_path / "diagnostics" / "scatter_step_3.npz")["train_p"], train_p)
    other = scatter_sample(old, roll, mask, seed=8, max_points=20000)[0]
    assert not np.array_equal(other, train_p)


def test_pearson_r_undefined_without_spread(tmp_path):
    assert pearson_r(np.array([0.5]), np.array([0.5])) is None
    assert pearson_r(np.array([0.5, 0.5]), np.array([0.1, 0.2])) is None
    assert save_scatter(tmp_path, 1,
                        torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), seed=0, max_points=10) == {}


@pytest.mark.smoke
def test_training_saves_samples_at_first_last_and_every_nth_step_and_the_report_draws_them(tmp_path, sft_dir):
    from tiny_tir import SMALL

    from evaluation.reports.run_report import write_report
    from trainer.loop import train
    from trainer.runtime.logger import read_metrics
    from trainer.setup.build import build_config

    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=3",
                                      "save_every=3", "diagnostics.scatter_every=2"])
    train(cfg, show_progress=False)
    saved = sorted(p.name for p in (tmp_path / "diagnostics").iterdir())
    assert saved == ["scatter_step_1.npz", "scatter_step_2.npz", "scatter_step_3.npz"]
    sample = np.load(tmp_path / "diagnostics" / "scatter_step_1.npz")
    assert 0 < len(sample["train_p"]) == len(sample["rollout_p"]) <= 20000
    assert ((sample["train_p"] >= 0) & (sample["train_p"] <= 1)).all()
    logged = [r for r in read_metrics(tmp_path) if "diag/scatter_pearson_r" in r]
    assert [r["step"] for r in logged] == [1, 2, 3] and all(-1 <= r["diag/scatter_pearson_r"] <= 1 for r in logged)
    assert "<h2>Figure 10: trainer vs rollout" in write_report(tmp_path).read_text()
