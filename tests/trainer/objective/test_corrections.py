"""TIS / MIS correction weights (hand-computed), both MIS semantics, and their use by the objective."""

import math

import pytest
import torch

from trainer.config.algo_config import AlgoConfig
from trainer.objective.corrections import compute_correction, correction_kwargs, prepare_corrections
from trainer.objective.losses import POLICY_LOSSES, aggregate
from trainer.objective.types import Batch
from trainer.setup.build import algorithm_presets, build_config
from trainer.update import denominators, loss_kwargs, micro_batch_objective

LN = math.log


def correct(old, rollout, mask, **settings):
    """`compute_correction` with the case's `settings`, AlgoConfig's value for every other one (the config is their
    one source: the function states no default)."""
    return compute_correction(old, rollout, mask, **correction_kwargs(AlgoConfig(**settings)))


def _token_case(values, mask=None):
    """old − rollout = log(values) per token, one row."""
    old = torch.tensor([[LN(v) for v in values]])
    rollout = torch.zeros_like(old)
    return old, rollout, torch.ones_like(old) if mask is None else torch.tensor([mask])


def test_tis_token_hand_computed():
    # v = [3, 0.5, 1] → w = min(v, 2) = [2, 0.5, 1]; m′ = m
    old, rollout, mask = _token_case([3.0, 0.5, 1.0])
    corr = correct(old, rollout, mask, correction="tis", corr_level="token", corr_upper=2.0)
    assert torch.allclose(corr.weights, torch.tensor([[2.0, 0.5, 1.0]]), atol=1e-6)
    assert torch.equal(corr.keep, mask)
    m = corr.metrics  # raw_ratio_*: v before truncation, thresholds C = 2 and 1/C = 0.5
    assert m["rollout_corr/raw_ratio_mean"] == pytest.approx(1.5)  # (3 + 0.5 + 1) / 3
    assert m["rollout_corr/raw_ratio_max"] == pytest.approx(3.0)
    assert m["rollout_corr/raw_ratio_fraction_high"] == pytest.approx(1 / 3)
    assert m["rollout_corr/raw_ratio_fraction_low"] == 0.0  # 0.5 < 0.5 is false
    # ESS: clamp → [2, 0.5, 1], mean 7/6, normalized [12/7, 3/7, 6/7], mean of squares 189/147 → 147/189
    assert m["rollout_corr/raw_ratio_eff_sample_size"] == pytest.approx(147 / 189, rel=1e-5)
    # applied_w_*: the applied w = [2, 0.5, 1]: mean 7/6, max 2, none above C; same ESS (no clamp bites)
    assert m["rollout_corr/applied_w_mean"] == pytest.approx(7 / 6)
    assert m["rollout_corr/applied_w_max"] == pytest.approx(2.0)
    assert m["rollout_corr/applied_w_ratio_fraction_high"] == 0.0
    assert m["rollout_corr/applied_w_eff_sample_size"] == pytest.approx(147 / 189, rel=1e-5)
    # rollout_is_* (verl): the same truncated w, but the high fraction counts the raw 3 > C
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(2.0)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)
    assert m["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(147 / 189, rel=1e-5)


def test_tis_seq_and_geo_hand_computed():
    # row 0: Δ = [ln 2, ln 2] → v = 4 → min(4, 5) = 4; row 1: Δ = [ln 4, ln 2] → v = 8 → 5
    old = torch.tensor([[LN(2), LN(2)], [LN(4), LN(2)]])
    zeros, ones = torch.zeros(2, 2), torch.ones(2, 2)
    seq = correct(old, zeros, ones, correction="tis", corr_level="seq", corr_upper=5.0)
    assert torch.allclose(seq.weights, torch.tensor([[4.0, 4.0], [5.0, 5.0]]), atol=1e-5)
    # geo: row 0 → e^{ln 2} = 2; row 1 → e^{(ln 4 + ln 2)/2} = √8 = 2.8284
    geo = correct(old, zeros, ones, correction="tis", corr_level="geo", corr_upper=5.0)
    assert torch.allclose(geo.weights, torch.tensor([[2.0, 2.0], [8**0.5, 8**0.5]]), atol=1e-5)
    # raw seq-level value in log space over rows: max = 8 (pre-truncation), fraction above 5 = 1/2;
    # applied weights [4, 5]: max 5, none above C; verl's seq-level rollout_is_max is the raw row value 8
    assert seq.metrics["rollout_corr/raw_ratio_max"] == pytest.approx(8.0, rel=1e-5)
    assert seq.metrics["rollout_corr/raw_ratio_fraction_high"] == pytest.approx(0.5)
    assert seq.metrics["rollout_corr/applied_w_max"] == pytest.approx(5.0, rel=1e-5)
    assert seq.metrics["rollout_corr/applied_w_ratio_fraction_high"] == 0.0
    assert seq.metrics["rollout_corr/rollout_is_max"] == pytest.approx(8.0, rel=1e-5)
    assert seq.metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.5)


def test_mis_paper_vs_verl_semantics_differ_as_reference_3_2():
    # v = [3, 0.5, 1, 1.5], C = U = 2, L = 0.75 → band = [0, 0, 1, 1]
    # paper: w = v·band = [0, 0, 1, 1.5] (kept value not truncated, not 1), m′ = m
    # verl:  w = min(v, 2)·band = [0, 0, 1, 1.5], m′ = m·band = [0, 0, 1, 1]
    old, rollout, mask = _token_case([3.0, 0.5, 1.0, 1.5])
    kw = dict(correction="mis", corr_level="token", corr_upper=2.0, corr_lower=0.75)
    paper = correct(old, rollout, mask, mis_semantics="paper", **kw)
    verl = correct(old, rollout, mask, mis_semantics="verl", **kw)
    assert torch.allclose(paper.weights, torch.tensor([[0.0, 0.0, 1.0, 1.5]]), atol=1e-6)
    assert torch.equal(paper.keep, mask)
    assert torch.allclose(verl.weights, paper.weights, atol=1e-6)
    assert torch.equal(verl.keep, torch.tensor([[0.0, 0.0, 1.0, 1.0]]))
    assert paper.metrics["rollout_corr/masked_frac"] == verl.metrics["rollout_corr/masked_frac"] == 0.5
    assert "rollout_corr/rollout_rs_masked_fraction" in verl.metrics
    # same kept tokens, different step size under token-mean with ℓ ≡ 1:
    # paper (0 + 0 + 1 + 1.5) / 4 = 0.625 — verl renormalizes over survivors: (1 + 1.5) / 2 = 1.25
    ell = torch.ones(1, 4)
    assert aggregate(paper.weights * ell, paper.keep, "token-mean").item() == pytest.approx(0.625)
    assert aggregate(verl.weights * ell, verl.keep, "token-mean").item() == pytest.approx(1.25)


def test_mis_default_lower_bounds():
    # v = 0.25, C = 2, L unset: paper uses L = 0 (the TIR scripts) and keeps it with w = 0.25;
    # verl uses L = 1/C = 0.5 and rejects it; an explicit L applies to both
    old, rollout, mask = _token_case([0.25])
    paper = correct(old, rollout, mask, correction="mis", corr_upper=2.0)
    verl = correct(old, rollout, mask, correction="mis", corr_upper=2.0, mis_semantics="verl")
    assert paper.weights.item() == pytest.approx(0.25) and paper.keep.item() == 1.0
    assert verl.weights.item() == 0.0 and verl.keep.item() == 0.0
    explicit = correct(old, rollout, mask, correction="mis", corr_upper=2.0, corr_lower=0.5)
    assert explicit.weights.item() == 0.0 and explicit.keep.item() == 1.0


def test_seq_mis_verl_rejects_whole_rows_and_shrinks_denominators():
    # row 0: S = ln 8 → v = 8 > 5 → rejected; row 1: S = ln 2 → kept (w = 2 on both tokens)
    old = torch.tensor([[LN(4), LN(2)], [LN(2), 0.0]])
    kw = dict(correction="mis", corr_level="seq", corr_upper=5.0, corr_lower=0.0)
    verl = correct(old, torch.zeros(2, 2), torch.ones(2, 2), mis_semantics="verl", **kw)
    assert torch.equal(verl.keep, torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
    assert torch.allclose(verl.weights, torch.tensor([[0.0, 0.0], [2.0, 2.0]]), atol=1e-6)
    assert verl.metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == 0.5
    batch = _batch(old, torch.zeros(2, 2), torch.ones(2, 2))
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(AlgoConfig(), batch)  # no correction: m′ = m
    assert [x.item() for x in denominators(batch, torch.arange(2))[:2]] == [4.0, 2.0]
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(AlgoConfig(**kw, mis_semantics="verl"), batch)
    assert [x.item() for x in denominators(batch, torch.arange(2))[:2]] == [2.0, 1.0]  # rejected row left


def test_verl_k1_quirk_only_when_asked():
    # band "0.6_1.4": on r keeps [0.6, 1.4]; verl's k1 test keeps r ∈ [1/1.4, 1/0.6] = [0.714, 1.667]
    # v = [0.65, 1.5, 1.0] → plain band [1, 0, 1]; quirk band [0, 1, 1]
    old, rollout, mask = _token_case([0.65, 1.5, 1.0])
    kw = dict(correction="mis", corr_level="token", corr_upper=1.4, corr_lower=0.6, mis_semantics="verl")
    plain = correct(old, rollout, mask, **kw)
    quirk = correct(old, rollout, mask, corr_k1_quirk=True, **kw)
    assert torch.equal(plain.keep, torch.tensor([[1.0, 0.0, 1.0]]))
    assert torch.equal(quirk.keep, torch.tensor([[0.0, 1.0, 1.0]]))
    # symmetric band "0.5_2.0": both agree
    sym = dict(kw, corr_upper=2.0, corr_lower=0.5)
    assert torch.equal(correct(old, rollout, mask, **sym).keep,
                       correct(old, rollout, mask, corr_k1_quirk=True, **sym).keep)


def test_veto_rejects_the_sequence_following_the_semantics():
    # row 0 has a token with v = 1e-5 < 1e-4 → the whole row is vetoed; row 1 is fine
    old = torch.tensor([[LN(1e-5), 0.0], [0.0, 0.0]])
    kw = dict(correction="tis", corr_upper=2.0, corr_veto=True, corr_veto_threshold=1e-4)
    paper = correct(old, torch.zeros(2, 2), torch.ones(2, 2), **kw)
    verl = correct(old, torch.zeros(2, 2), torch.ones(2, 2), mis_semantics="verl", **kw)
    assert torch.equal(paper.weights, torch.tensor([[0.0, 0.0], [1.0, 1.0]])) and paper.keep.all()
    assert torch.equal(verl.keep, torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
    assert paper.metrics["rollout_corr/rollout_is_veto_fraction"] == 0.5
    assert paper.metrics["rollout_corr/rollout_is_catastrophic_token_fraction"] == 0.25


def test_batch_normalization_hand_computed():
    # token: w = [2, 1] (C = 10) → mean 1.5 → [4/3, 2/3]
    old, rollout, mask = _token_case([2.0, 1.0])
    tok = correct(old, rollout, mask, correction="tis", corr_upper=10.0, corr_batch_norm=True)
    assert torch.allclose(tok.weights, torch.tensor([[4 / 3, 2 / 3]]), atol=1e-6)
    assert tok.metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(1.5)
    # seq: row weights 4 (3 tokens) and 1 (1 token): mean over rows 2.5, not over tokens (13/4)
    old = torch.tensor([[LN(4), 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    seq = correct(old, torch.zeros(2, 3), mask, correction="tis", corr_level="seq", corr_upper=10.0,
                             corr_batch_norm=True)
    assert torch.allclose(seq.weights, torch.tensor([[1.6, 1.6, 1.6], [0.4, 0.0, 0.0]]), atol=1e-6)


def test_nonfinite_rollout_logp_is_masked_and_counted():
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    rollout = torch.tensor([[-1.0, float("-inf"), float("nan")]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the NaN sits on a tool token: not counted
    corr = correct(old, rollout, mask, correction="mis", corr_level="seq", corr_upper=5.0)
    assert torch.equal(corr.keep, torch.tensor([[1.0, 0.0, 0.0]]))
    assert torch.isfinite(corr.weights).all() and corr.weights[0, 0].item() == pytest.approx(1.0)
    assert corr.metrics["rollout_corr/nonfinite_tokens"] == 1.0


@pytest.mark.parametrize("bad,needle", [
    (dict(correction="clip"), "tis"), (dict(corr_level="episode"), "turn_geo"), (dict(mis_semantics="x"), "verl"),
    (dict(corr_upper=2.0, corr_lower=3.0), "corr_lower"),
])
def test_bad_settings_raise_one_clear_error(bad, needle):
    old, rollout, mask = _token_case([1.0])
    with pytest.raises(ValueError, match=needle):
        correct(old, rollout, mask, **bad)


# ------------------------------------------------------------------------ objective integration


def _batch(old, rollout, mask, adv=None):
    b, t = mask.shape
    return Batch(input_ids=torch.zeros(b, t + 1, dtype=torch.long), attention_mask=torch.ones(b, t + 1),
                 response_start=torch.ones(b, dtype=torch.long), response_len=torch.full((b,), t),
                 response_ids=torch.zeros(b, t, dtype=torch.long), loss_mask=mask, rollout_logp=rollout,
                 rewards=torch.zeros(b), group_ids=torch.zeros(b, dtype=torch.long),
                 advantages=(torch.ones(b, 1) * mask) if adv is None else adv, old_logp=old)


def _random_batch(b=6, t=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3
    rollout = old + 0.4 * torch.randn(b, t, generator=g)
    mask = (torch.rand(b, t, generator=g) > 0.25).float()
    adv = torch.randn(b, 1, generator=g) * mask
    logp = old + 0.2 * torch.randn(b, t, generator=g)
    return _batch(old, rollout, mask, adv), logp


def test_every_loss_and_correction_keyword_is_an_algo_field():
    for name in POLICY_LOSSES:
        assert set(loss_kwargs(AlgoConfig(policy_loss=name))) <= set(vars(AlgoConfig()))
    assert set(correction_kwargs(AlgoConfig())) <= set(vars(AlgoConfig()))


@pytest.mark.parametrize("preset", algorithm_presets())
def test_every_preset_gives_a_finite_objective_with_gradient(preset):
    algo = build_config(None, [f"algorithm={preset}"]).algo
    batch, logp = _random_batch()
    batch.corr_weights, batch.corr_keep, metrics = prepare_corrections(algo, batch)
    assert all(math.isfinite(v) for v in metrics.values())
    if algo.kl_coef:  # the reference forward the loop runs beside θ_old's
        batch.ref_logp = batch.old_logp - 0.05
    rows = torch.arange(len(batch))
    n_tokens, n_seqs, _ = denominators(batch, rows)
    logp = logp.requires_grad_(True)
    loss, loss_metrics = micro_batch_objective(algo, batch, logp, torch.zeros_like(logp), n_tokens=n_tokens,
                                               n_seqs=n_seqs, norm_len=logp.shape[1])  # Dr.GRPO's T_norm
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logp.grad).all()
    assert (logp.grad[batch.loss_mask == 0] == 0).all()
    assert all(math.isfinite(v) for v in loss_metrics.values())


@pytest.mark.parametrize("preset", ["token_mis", "seq_tis", "token_mis_tokenlevel"])
def test_micro_batching_matches_the_whole_batch(preset):
    # corrections prepared once for the rollout batch, the loss split into micro-batches: same loss
    algo = build_config(None, [f"algorithm={preset}", "algo.mis_semantics=verl"]).algo
    batch, logp = _random_batch(seed=3)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)
    rows = torch.arange(len(batch))
    n_tokens, n_seqs, _ = denominators(batch, rows)
    whole, _ = micro_batch_objective(algo, batch, logp, torch.zeros_like(logp), n_tokens=n_tokens, n_seqs=n_seqs)
    parts = sum(micro_batch_objective(algo, batch.select(r), logp[r], torch.zeros_like(logp[r]),
                                      n_tokens=n_tokens, n_seqs=n_seqs)[0] for r in (rows[:2], rows[2:]))
    assert parts.item() == pytest.approx(whole.item(), rel=1e-5, abs=1e-7)


def test_objective_refuses_gspo_with_another_aggregation():
    algo = AlgoConfig(policy_loss="gspo", loss_agg="token-mean")  # built directly: the objective's own guard
    batch, logp = _random_batch()
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        micro_batch_objective(algo, batch, logp, torch.zeros_like(logp), n_tokens=torch.tensor(1.0),
                              n_seqs=torch.tensor(1.0))


# ------------------------------------------------------- metrics: applied weights vs raw ratio


def test_applied_w_metrics_describe_applied_weights_under_a_heavy_tail():
    # token TIS, C = 2: v = [1e6, 1, 1, 0.5] → applied w = [2, 1, 1, 0.5]
    # raw: mean (1e6 + 2.5)/4 = 250000.625, max 1e6; applied: mean 4.5/4 = 1.125 ≤ C, max 2, min 0.5
    old, rollout, mask = _token_case([1e6, 1.0, 1.0, 0.5])
    m = correct(old, rollout, mask, correction="tis", corr_upper=2.0).metrics
    assert m["rollout_corr/raw_ratio_mean"] == pytest.approx(250000.625, rel=1e-5)
    assert m["rollout_corr/raw_ratio_max"] == pytest.approx(1e6, rel=1e-5)
    assert m["rollout_corr/applied_w_mean"] == pytest.approx(1.125, rel=1e-6)
    assert m["rollout_corr/applied_w_max"] == pytest.approx(2.0) and m["rollout_corr/applied_w_min"] == 0.5
    # applied std: E[w²] = (4 + 1 + 1 + 0.25)/4 = 1.5625, minus 1.125² = 1.265625 → √0.296875
    assert m["rollout_corr/applied_w_std"] == pytest.approx(0.296875**0.5, rel=1e-5)
    # one row: its mean applied weight is the token mean; the raw row mean is the huge one
    assert m["rollout_corr/applied_w_seq_mean"] == pytest.approx(1.125, rel=1e-6)
    assert m["rollout_corr/raw_ratio_seq_mean"] == pytest.approx(250000.625, rel=1e-5)
    assert m["rollout_corr/applied_w_mean"] == pytest.approx(m["rollout_corr/weight_mean"])


def test_applied_w_metrics_cover_only_what_enters_the_loss():
    # seq level, C = 5: row 0 S = 2·ln 1e3 → v = 1e6; row 1 S = 0 → v = 1
    old = torch.tensor([[LN(1e3), LN(1e3)], [0.0, 0.0]])
    zeros, ones = torch.zeros(2, 2), torch.ones(2, 2)
    kw = dict(correction="mis", corr_level="seq", corr_upper=5.0, corr_lower=0.0)
    # verl MIS rejects row 0 (leaves m′): the applied weights are row 1's only → mean = max = 1
    verl = correct(old, zeros, ones, mis_semantics="verl", **kw).metrics
    assert verl["rollout_corr/applied_w_mean"] == pytest.approx(1.0)
    assert verl["rollout_corr/applied_w_max"] == pytest.approx(1.0)
    assert verl["rollout_corr/applied_w_seq_mean"] == pytest.approx(1.0)
    assert verl["rollout_corr/raw_ratio_max"] == pytest.approx(1e6, rel=1e-5)
    assert verl["rollout_corr/raw_ratio_fraction_high"] == pytest.approx(0.5)
    # paper MIS keeps row 0 in m′ with w = 0: applied mean (0 + 0 + 1 + 1)/4 = 0.5, min 0, seq mean (0 + 1)/2
    paper = correct(old, zeros, ones, mis_semantics="paper", **kw).metrics
    assert paper["rollout_corr/applied_w_mean"] == pytest.approx(0.5)
    assert paper["rollout_corr/applied_w_min"] == 0.0
    assert paper["rollout_corr/applied_w_max"] == pytest.approx(1.0)
    assert paper["rollout_corr/applied_w_seq_mean"] == pytest.approx(0.5)
    assert paper["rollout_corr/applied_w_ratio_fraction_low"] == pytest.approx(0.5)  # w = 0 < 1/C on row 0
    # TIS with batch norm: applied [5, 5, 1, 1] / 3 (mean over rows (5 + 1)/2) → token mean 1, max 5/3
    tis = correct(old, zeros, ones, correction="tis", corr_level="seq", corr_upper=5.0,
                             corr_batch_norm=True).metrics
    assert tis["rollout_corr/applied_w_mean"] == pytest.approx(1.0)
    assert tis["rollout_corr/applied_w_max"] == pytest.approx(5 / 3)
    assert tis["rollout_corr/raw_ratio_mean"] == pytest.approx((2e6 + 2) / 4, rel=1e-5)


# ------------------------------------------------------- metrics: verl 0.9's rollout_is_* definitions


def test_rollout_is_token_tis_truncates_the_max_but_counts_the_raw_tail():
    # token TIS, C = 2 (L = 1/C = 0.5): v = [13.4, 1, 1, 0.25] → w = min(v, 2) = [2, 1, 1, 0.25]
    old, rollout, mask = _token_case([13.4, 1.0, 1.0, 0.25])
    m = correct(old, rollout, mask, correction="tis", corr_upper=2.0).metrics
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(2.0)  # verl shows the truncated max
    assert m["rollout_corr/rollout_is_min"] == pytest.approx(0.25)
    assert m["rollout_corr/raw_ratio_max"] == pytest.approx(13.4, rel=1e-5)
    # fractions on the raw v: 13.4 > 2 and 0.25 < 0.5 → 1/4 each (the applied w never exceeds C)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.25)
    assert m["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx(0.25)
    assert m["rollout_corr/applied_w_ratio_fraction_high"] == 0.0
    # mean 4.25/4 = 1.0625; E[w²] = (4 + 1 + 1 + 0.0625)/4 = 1.515625;
    # var = 1.515625 − 1.0625² = 1.515625 − 1.12890625 = 0.38671875
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(1.0625)
    assert m["rollout_corr/rollout_is_std"] == pytest.approx(0.38671875**0.5, rel=1e-5)
    # ESS = mean² / E[w²] = (17/16)² / (97/64) = 289/388
    assert m["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(289 / 388, rel=1e-5)
    # one row: seq mean of w 1.0625 (std 0), deviation 0.0625; its raw mean (13.4 + 2.25)/4 = 3.9125 > 2
    assert m["rollout_corr/rollout_is_seq_mean"] == pytest.approx(1.0625)
    assert m["rollout_corr/rollout_is_seq_std"] == 0.0
    assert m["rollout_corr/rollout_is_seq_max_deviation"] == pytest.approx(0.0625, rel=1e-5)
    assert m["rollout_corr/rollout_is_seq_fraction_high"] == 1.0
    assert m["rollout_corr/rollout_is_seq_fraction_low"] == 0.0


def test_rollout_is_sequence_level_extremes_come_from_the_raw_row_value():
    # seq TIS, C = 5 (L = 0.2): row 0 Σ Δ = ln 4 + ln 2 → v = 8 → w = 5; row 1 ln 0.5 + ln 0.2 → v = 0.1 = w
    old = torch.tensor([[LN(4), LN(2)], [LN(0.5), LN(0.2)]])
    zeros, ones = torch.zeros(2, 2), torch.ones(2, 2)
    m = correct(old, zeros, ones, correction="tis", corr_level="seq", corr_upper=5.0).metrics
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(8.0, rel=1e-5)  # raw row value, not the w = 5
    assert m["rollout_corr/applied_w_max"] == pytest.approx(5.0, rel=1e-5)
    assert m["rollout_corr/rollout_is_min"] == pytest.approx(0.1, rel=1e-5)
    # per row: 8 > 5 and 0.1 < 0.2 → 1/2 each
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.5)
    assert m["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx(0.5)
    # w = [5, 5, 0.1, 0.1]: mean 2.55; E[w²] = 50.02/4 = 12.505, var = 12.505 − 6.5025 = 6.0025 = 2.45²
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(2.55, rel=1e-6)
    assert m["rollout_corr/rollout_is_std"] == pytest.approx(2.45, rel=1e-5)
    assert m["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(6.5025 / 12.505, rel=1e-5)
    # row means of w [5, 0.1]: unbiased std 4.9/√2, largest deviation |5 − 1| = 4; raw row means [8, 0.1]
    assert m["rollout_corr/rollout_is_seq_std"] == pytest.approx(4.9 / 2**0.5, rel=1e-5)
    assert m["rollout_corr/rollout_is_seq_max"] == pytest.approx(5.0, rel=1e-5)
    assert m["rollout_corr/rollout_is_seq_min"] == pytest.approx(0.1, rel=1e-5)
    assert m["rollout_corr/rollout_is_seq_max_deviation"] == pytest.approx(4.0, rel=1e-5)
    assert m["rollout_corr/rollout_is_seq_fraction_high"] == pytest.approx(0.5)
    assert m["rollout_corr/rollout_is_seq_fraction_low"] == pytest.approx(0.5)


def test_rollout_is_turn_level_counts_one_unit_per_turn():
    # alprl's choice for turn levels: each turn is an IS unit, as a row is at seq level.
    # m = [1, 1, 0, 1]: turn 0 Σ Δ = ln 2 + ln 4 → v = 8 → w = min(8, 4) = 4; turn 1 ln 0.5 → w = 0.5
    old = torch.tensor([[LN(2), LN(4), 0.0, LN(0.5)]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]])
    m = correct(old, torch.zeros(1, 4), mask, correction="tis", corr_level="turn",
                           corr_upper=4.0).metrics
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(8.0, rel=1e-5)
    assert m["rollout_corr/rollout_is_min"] == pytest.approx(0.5, rel=1e-5)
    # 1 turn of 2 above C (token-weighted it would be 2 tokens of 3)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.5)
    assert m["rollout_corr/rollout_is_ratio_fraction_low"] == 0.0  # 0.5 ≥ 1/C = 0.25
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(8.5 / 3, rel=1e-6)  # tokens: (4 + 4 + 0.5)/3


def test_rollout_is_is_computed_before_rejection_and_batch_norm():
    # token TIS, C = 2: v = [4, 1, 1, 0.8] → w = [2, 1, 1, 0.8]. token_k2 at 0.5 rejects v = 4
    # (½ ln²4 = 0.96); ½ ln²0.8 = 0.025 stays. Batch norm divides the kept [1, 1, 0.8] by their mean 14/15
    old, rollout, mask = _token_case([4.0, 1.0, 1.0, 0.8])
    m = correct(old, rollout, mask, correction="tis", corr_upper=2.0, rollout_rs="token_k2",
                           rollout_rs_threshold="0.5", corr_batch_norm=True).metrics
    assert m["rollout_corr/rollout_rs_token_k2_masked_fraction"] == pytest.approx(0.25)
    assert m["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(14 / 15, rel=1e-6)
    # verl's view: all 4 tokens of m, before rejection and normalization: mean 4.8/4 = 1.2, max 2
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(1.2, rel=1e-6)
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(2.0)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.25)
    assert m["rollout_corr/rollout_is_seq_mean"] == pytest.approx(1.2, rel=1e-6)
    # the loss's view: [15/14, 15/14, 6/7] on the 3 kept tokens, mean 1
    assert m["rollout_corr/applied_w_mean"] == pytest.approx(1.0, rel=1e-6)
    assert m["rollout_corr/applied_w_max"] == pytest.approx(15 / 14, rel=1e-6)
    assert m["rollout_corr/weight_mean"] == pytest.approx(1.0, rel=1e-6)


def test_rollout_is_keeps_mis_rejected_rows_at_weight_zero():
    # seq verl-MIS, C = 5, L = 0: row 0 v = 1e6 is out of band → w = 0 and leaves m′; row 1 v = 1 → w = 1.
    # verl's metrics still run over m: mean (0 + 0 + 1 + 1)/4 = 0.5; extremes from the raw rows 1e6 and 1
    old = torch.tensor([[LN(1e3), LN(1e3)], [0.0, 0.0]])
    m = correct(old, torch.zeros(2, 2), torch.ones(2, 2), correction="mis", corr_level="seq",
                           corr_upper=5.0, corr_lower=0.0, mis_semantics="verl").metrics
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(0.5)
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(1e6, rel=1e-5)
    assert m["rollout_corr/rollout_is_min"] == pytest.approx(1.0)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.5)
    assert m["rollout_corr/rollout_is_ratio_fraction_low"] == 0.0  # L = 0
    # ESS: w normalized by 0.5 → [0, 0, 2, 2], mean square 2 → 0.5; raw row means [1e6, 1] → 1/2 above C
    assert m["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(0.5, rel=1e-6)
    assert m["rollout_corr/rollout_is_seq_fraction_high"] == pytest.approx(0.5)
    assert m["rollout_corr/applied_w_mean"] == pytest.approx(1.0)  # only row 1 enters the loss


def test_rollout_is_ess_is_zero_when_every_weight_is_masked():
    # paper MIS, band [0.5, 2]: v = [4, 0.25] are both out → w = [0, 0]; verl's ESS would divide by zero
    old, rollout, mask = _token_case([4.0, 0.25])
    m = correct(old, rollout, mask, correction="mis", corr_upper=2.0, corr_lower=0.5).metrics
    assert m["rollout_corr/rollout_is_mean"] == 0.0 and m["rollout_corr/rollout_is_max"] == 0.0
    assert m["rollout_corr/rollout_is_eff_sample_size"] == 0.0 and m["rollout_corr/rollout_is_std"] == 0.0
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.5)
    assert m["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx(0.5)
