"""Table 5 ratio diagnostics: hand-computed statistics, the loss ratio each registry entry really uses, the
post-update policy KL, and a 2-step Seq-ALP run where the loss ratio equals r_mis at σ = 0 and departs from it
at σ > 0."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_tir import SMALL

from trainer.config.algo_config import AlgoConfig
from trainer.diagnostics.policy_drift import policy_kl
from trainer.diagnostics.ratio_diagnostics import (
    DIAG_PROB_BINS,
    LOSS_RATIO,
    RATIO_KINDS,
    RATIO_STATS,
    RatioProbe,
    diag_suffixes,
    group_sample,
    ratio_stats,
    spaced_rows,
)
from trainer.loop import train
from trainer.objective.losses import POLICY_LOSSES
from trainer.runtime.logger import read_metrics
from trainer.setup.build import build_config
from trainer.update import loss_kwargs


def test_ratio_stats_by_hand():
    r = torch.tensor([0.5, 1.0, 1.0, 2.0, 4.0])
    mu = torch.tensor([0.1, 0.3, 0.3, 0.9, 1.0])
    out = ratio_stats(r.log(), mu, clip_low=0.2, clip_high=0.28)
    # linear interpolation at position q·(n − 1) = 4q of the sorted ratios
    assert out["p2"] == pytest.approx(0.5 + 0.08 * 0.5)  # 0.54
    assert out["p25"] == pytest.approx(1.0) and out["p50"] == pytest.approx(1.0)
    assert out["p75"] == pytest.approx(2.0)
    assert out["p98"] == pytest.approx(2.0 + 0.92 * 2.0)  # 3.84
    assert (out["min"], out["max"]) == (pytest.approx(0.5), pytest.approx(4.0))
    assert out["clip_frac"] == pytest.approx(3 / 5)  # 0.5, 2 and 4 lie outside [0.8, 1.28]
    assert len(DIAG_PROB_BINS) == 6
    assert out["bin0/p2"] == pytest.approx(0.5) and out["bin0/p98"] == pytest.approx(0.5)  # μ = 0.1
    assert out["bin1/p2"] == pytest.approx(1.0) and out["bin1/p98"] == pytest.approx(1.0)  # μ = 0.3, 0.3
    assert all(math.isnan(out[f"bin{j}/{q}"]) for j in (2, 3) for q in ("p2", "p98"))  # no token there
    assert out["bin4/p2"] == pytest.approx(2.04) and out["bin4/p98"] == pytest.approx(3.96)  # μ = 0.9 and 1 (in)
    assert set(ratio_stats(r.log(), None, clip_low=0.2, clip_high=0.28)) == set(RATIO_STATS)
    assert ratio_stats(torch.zeros(0), None, clip_low=0.2, clip_high=0.28) == {}


def test_diag_suffixes_first_and_last():
    assert diag_suffixes(0, 1) == ("", "_last")
    assert [diag_suffixes(k, 3) for k in range(3)] == [("",), (), ("_last",)]


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("level", ["token", "seq", "geo"])
def test_loss_ratio_is_the_one_the_loss_uses(name, level):
    assert set(LOSS_RATIO) == set(POLICY_LOSSES)
    gen = torch.Generator().manual_seed(0)
    logp, old, rollout = (-1.0 + 0.1 * torch.randn(3, 4, generator=gen) for _ in range(3))  # (B, T)
    mask = torch.ones(3, 4)  # equal lengths: the token-weighted mean of sequence ratios is their plain mean
    adv = torch.tensor([[1.0], [-1.0], [0.5]]).expand(3, 4)
    algo = AlgoConfig(policy_loss=name, upd_level=level, quatro_delta=0.02)
    _, metrics = POLICY_LOSSES[name](logp, old, rollout, adv, mask, **loss_kwargs(algo))
    probe = RatioProbe(algo)
    probe.add(logp, logp, old, rollout, mask, perturbed=False)
    if probe.level == "token":
        mean = torch.cat(probe.tokens["loss"]).exp().mean()
    else:
        mean = torch.cat(probe.seqs["loss"]).exp().mean()
    assert metrics["ratio_mean"] == pytest.approx(mean.item(), rel=1e-5)
    out = probe.metrics("")
    assert {f"diag/ratio_{k}/{s}" for k in RATIO_KINDS for s in RATIO_STATS} <= set(out)
    assert any(k.startswith("diag/seq_ratio_loss/") for k in out) == (probe.level != "token")
    assert not any(k.startswith("perturb/dp") for k in out)


def test_policy_kl_by_hand():
    new = torch.tensor([[math.log(2.0), math.log(0.5), 5.0]])
    old = torch.zeros(1, 3)
    out = policy_kl(new, old, torch.tensor([[1.0, 1.0, 0.0]]))
    assert out["diag/policy_kl_k1"] == pytest.approx(0.0, abs=1e-12)  # −(ln 2 − ln 2)/2
    # k3 = ((2 − 1 − ln 2) + (0.5 − 1 + ln 2)) / 2 = 0.5 / 2
    assert out["diag/policy_kl_k3"] == pytest.approx(0.25)


def _seq_alp_run(tmp_path, sft_dir, sigma: float) -> list[dict]:
    learnable = "true" if sigma > 0 else "false"
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=2",
                                      "algorithm=seq_alp", f"perturb.sigma_init={sigma}",
                                      f"perturb.learnable={learnable}"])
    train(cfg, show_progress=False)
    return read_metrics(tmp_path)


@pytest.mark.smoke
def test_seq_alp_loss_ratio_equals_r_mis_only_without_noise(tmp_path, sft_dir):
    quantiles = ("p2", "p25", "p50", "p75", "p98")
    clean = _seq_alp_run(tmp_path / "sigma0", sft_dir, 0.0)
    noisy = _seq_alp_run(tmp_path / "sigma5e-2", sft_dir, 0.05)
    assert [r["step"] for r in clean] == [1, 2] == [r["step"] for r in noisy]
    for rec in clean:  # first mini-batch, σ = 0: π_θ,δ = π_θ = π_θold, so π_θ,δ/μ is r_mis
        for q in quantiles:
            assert rec[f"diag/ratio_loss/{q}"] == pytest.approx(rec[f"diag/ratio_mis/{q}"], rel=1e-4)
            assert rec[f"diag/seq_ratio_loss/{q}"] == pytest.approx(rec[f"diag/seq_ratio_mis/{q}"], rel=1e-3)
        for j in range(5):
            for q in ("p2", "p98"):
                a, b = rec[f"diag/ratio_loss/bin{j}/{q}"], rec[f"diag/ratio_mis/bin{j}/{q}"]
                assert (a is None and b is None) or a == pytest.approx(b, rel=1e-4)
        assert rec["perturb/sigma/layer_0"] == 0.0 and rec["perturb/dp/p99"] < 1e-4  # no noise: no shift
        assert rec["perturb/dp/layer0/p75"] < 1e-4 and rec["perturb/dp/layer1/p75"] < 1e-4
    for rec in noisy:
        assert any(abs(rec[f"diag/ratio_loss/{q}"] - rec[f"diag/ratio_mis/{q}"]) > 1e-3 for q in quantiles)
        assert rec["perturb/dp/p50"] <= rec["perturb/dp/p75"] <= rec["perturb/dp/p99"] and rec["perturb/dp/p99"] > 0
        assert rec["perturb/sigma/layer_0"] > 0 and rec["perturb/sigma/layer_1"] > 0
        assert 0 < rec["perturb/dp/layer0/p75"] and 0 < rec["perturb/dp/layer1/p75"]  # each layer's noise alone
        assert rec["diag/ratio_upd/p50"] == pytest.approx(1.0)  # first mini-batch: clean π_θ = π_θold
    for rec in clean + noisy:
        assert {f"diag/ratio_{k}_last/{s}" for k in RATIO_KINDS for s in RATIO_STATS} <= set(rec)
        assert rec["diag/policy_kl_k3"] >= 0 and math.isfinite(rec["diag/policy_kl_k1"])
        assert rec["diag/entropy"] > 0 and "actor/grad_norm" in rec


@pytest.mark.smoke
def test_diagnostics_every_spaces_out_the_extra_forwards(tmp_path, sft_dir):
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=4",
                                      "algorithm=seq_alp", "perturb.sigma_init=0.05", "diagnostics.every=3",
                                      "optim.num_minibatches=2"])
    train(cfg, show_progress=False)
    records = {r["step"]: r for r in read_metrics(tmp_path)}
    extra = ("diag/ratio_upd_last/p98", "diag/ratio_byp_last/p2", "diag/policy_kl_k3", "diag/entropy",
             "perturb/dp/layer0/p75")  # each costs a forward
    free = ("diag/ratio_loss/p98", "diag/ratio_mis/p2", "diag/ratio_upd/p50", "diag/ratio_loss_last/p98",
            "diag/ratio_mis_last/bin0/p2", "perturb/dp/p75", "perturb/sigma/layer_0", "ratio/mis_token/ess_kish")
    for step in (1, 3, 4):  # every 3rd, the first and the last
        assert all(k in records[step] for k in extra + free), step
    assert not any(k in records[2] for k in extra)
    assert all(k in records[2] for k in free)


def test_row_samples_are_whole_groups_and_spread():
    groups = torch.arange(16).repeat_interleave(8)  # (128,) 16 groups of 8
    rows = group_sample(groups, 16)
    assert len(rows) == 16 and set(groups[rows].tolist()) == {0, 15}  # two whole groups, first and last
    assert len(group_sample(groups, 40)) == 40 and len(set(groups[group_sample(groups, 40)].tolist())) == 5
    assert len(group_sample(groups, 3)) == 8  # at least one group
    assert torch.equal(group_sample(groups, 0), torch.arange(128))
    assert spaced_rows(64, 16).tolist()[::5] == [0, 21, 42, 63] and len(spaced_rows(64, 16)) == 16
    assert torch.equal(spaced_rows(10, 16), torch.arange(10))


def test_quantiles_thin_past_the_torch_limit(monkeypatch):
    import trainer.diagnostics.ratio_diagnostics as rd

    monkeypatch.setattr(rd, "QUANTILE_LIMIT", 4)
    x = torch.arange(10.0)
    assert rd._thin(x).tolist() == [0.0, 3.0, 6.0, 9.0]  # every ceil(10 / 4) = 3rd element
    out = rd.ratio_stats(torch.zeros(10), None, clip_low=0.2, clip_high=0.28)
    assert out["p50"] == 1.0 and out["clip_frac"] == 0.0  # min, max and clip_frac still see every token
