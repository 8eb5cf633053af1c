"""DPPO (binary TV and KL), SAPO, OPSM, M2PO and the importance-corrected KL, each worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.objective.losses import dppo_kl, dppo_tv, kl_penalty, sapo
from trainer.objective.offpolicy_masks import m2po_keep, opsm_keep

LN = math.log


def _row(*values):
    return torch.tensor([list(values)], dtype=torch.float64)


def test_dppo_tv_masks_only_tokens_past_delta_in_the_advantages_direction():
    # sampler probabilities μ and current π_θ of four sampled tokens (the fifth is padding):
    #   t0: 0.5 → 0.8 (+0.3), A = +1: past δ_hi = 0.2 the way A pushes: masked
    #   t1: 0.5 → 0.6 (+0.1), A = +1: inside: kept
    #   t2: 0.5 → 0.2 (−0.3), A = +1: moved against A's push (down): kept however far
    #   t3: 0.6 → 0.3 (−0.3), A = −1: past δ_lo = 0.2 the way A pushes (down): masked
    mu = _row(0.5, 0.5, 0.5, 0.6, 1.0).log()
    pi = _row(0.8, 0.6, 0.2, 0.3, 1.0).log().requires_grad_(True)
    adv = _row(1.0, 1.0, 1.0, -1.0, 3.0)
    mask = _row(1.0, 1.0, 1.0, 1.0, 0.0)
    per_token, metrics = dppo_tv(pi, mu, mu, adv, mask, clip_low=0.2, clip_high=0.2)
    r = [0.8 / 0.5, 0.6 / 0.5, 0.2 / 0.5, 0.3 / 0.6]
    assert per_token[0].tolist() == pytest.approx([0.0, -r[1], -r[2], 0.0, 0.0])
    per_token.sum().backward()
    # ∂ℓ/∂log π = −A·r on kept tokens (r carries the gradient, SkyRL's form), 0 on masked ones
    assert pi.grad[0].tolist() == pytest.approx([0.0, -r[1], -r[2], 0.0, 0.0])
    assert metrics["pg_clipfrac"] == pytest.approx(0.5)
    assert metrics["dppo_masked_high"] == pytest.approx(0.25) and metrics["dppo_masked_low"] == pytest.approx(0.25)


def test_dppo_kl_uses_the_binary_kl_to_the_sampler():
    # t0: μ 0.5 → π 0.7, A = +1: KL({.5,.5}‖{.7,.3}) = .5 ln(.5/.7) + .5 ln(.5/.3) = 0.0872 > δ 0.05: masked
    # t1: μ 0.5 → π 0.55, A = +1: .5 ln(.5/.55) + .5 ln(.5/.45) = 0.00503 ≤ 0.05: kept
    # t2: μ 0.9 → π 0.5, A = −1: .9 ln(.9/.5) + .1 ln(.1/.5) = 0.3681 > 0.05 and π fell as A pushes: masked
    # t3: μ 0.2 → π 0.6, A = −1: KL 0.335, but π rose against A's push: kept
    kl0 = 0.5 * LN(0.5 / 0.7) + 0.5 * LN(0.5 / 0.3)
    kl1 = 0.5 * LN(0.5 / 0.55) + 0.5 * LN(0.5 / 0.45)
    assert kl0 == pytest.approx(0.0872, abs=1e-4) and kl1 == pytest.approx(0.00503, abs=1e-5)
    mu = _row(0.5, 0.5, 0.9, 0.2).log()
    pi = _row(0.7, 0.55, 0.5, 0.6).log()
    adv = _row(1.0, 1.0, -1.0, -1.0)
    per_token, metrics = dppo_kl(pi, mu, mu, adv, torch.ones_like(mu), clip_low=0.05, clip_high=0.05)
    assert per_token[0].tolist() == pytest.approx([0.0, -0.55 / 0.5, 0.0, 0.6 / 0.2])
    assert metrics["pg_clipfrac"] == pytest.approx(0.5)


def test_dppo_is_anchored_to_the_sampler_not_the_old_policy():
    # the same π_θ and μ with another π_old: nothing changes (π_old is unused)
    mu, pi, adv, mask = _row(0.5).log(), _row(0.9).log(), _row(1.0), _row(1.0)
    a, _ = dppo_tv(pi, mu, mu, adv, mask, clip_low=0.2, clip_high=0.2)
    b, _ = dppo_tv(pi, _row(0.9).log(), mu, adv, mask, clip_low=0.2, clip_high=0.2)
    assert a.tolist() == b.tolist() == [[0.0]]  # 0.9 − 0.5 = 0.4 > 0.2 from μ (from π_old it would be 0)


def test_sapo_is_a_soft_gate_whose_slope_at_one_is_grpos():
    # f_τ(r) = σ(τ(r − 1))·4/τ: at r = 1, f = 2/τ and ∂f/∂r = 1; r = 2, A = +1, τ 1: f = 4σ(1) = 2.9242;
    # r = 0.5, A = −1, τ 1.05: f = σ(−0.525)·4/1.05 = 0.37168·3.8095 = 1.4159
    old = _row(LN(0.5), LN(0.5), LN(0.5), 0.0)
    ratios = [1.0, 2.0, 0.5]
    logp = (old + _row(*[LN(r) for r in ratios], 0.0)).requires_grad_(True)
    adv = _row(1.0, 1.0, -1.0, 0.0)
    mask = _row(1.0, 1.0, 1.0, 0.0)
    per_token, metrics = sapo(logp, old, old, adv, mask, sapo_tau_pos=1.0, sapo_tau_neg=1.05)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    f = [2.0, 4 * sig(1.0), sig(-0.525) * 4 / 1.05]
    assert f[1] == pytest.approx(2.9242, abs=1e-4) and f[2] == pytest.approx(1.4159, abs=1e-4)
    assert per_token[0].tolist() == pytest.approx([-f[0], -f[1], f[2], 0.0])
    per_token.sum().backward()
    # ∂ℓ/∂log π = −A·4σ(1 − σ)·r: −1 at r = 1 (GRPO), −4σ(1)(1 − σ(1))·2 = −1.5729 at r = 2
    assert logp.grad[0, 0].item() == pytest.approx(-1.0)
    assert logp.grad[0, 1].item() == pytest.approx(-4 * sig(1) * (1 - sig(1)) * 2)
    assert metrics["pg_clipfrac"] == 0.0


def test_opsm_masks_negative_sequences_the_policy_moved_away_from():
    # row 0: A < 0, mean log(μ/π) = (0.3 + 0.1)/2 = 0.2 > δ 0.1: masked
    # row 1: A < 0, mean 0.05 ≤ 0.1: kept; row 2: A > 0, mean 0.5: kept (only negative sequences are masked)
    logp = torch.zeros(3, 3, dtype=torch.float64)
    rollout = torch.tensor([[0.3, 0.1, 9.0], [0.05, 0.05, 0.0], [0.5, 0.5, 0.5]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    adv = torch.tensor([[-1.0], [-1.0], [1.0]], dtype=torch.float64) * mask
    keep, metrics = opsm_keep(logp, rollout, adv, mask, delta=0.1)
    assert keep[:, 0].tolist() == [0.0, 1.0, 1.0]  # the padded 9.0 never entered the mean
    assert metrics["opsm_masked_seq_frac"] == pytest.approx(1 / 3)
    assert metrics["opsm_masked_token_frac"] == pytest.approx(2 / 7)


def test_m2po_drops_the_largest_second_moments_until_the_rest_is_below_the_threshold():
    # log μ − log π_old on five tokens: 0.5, −0.3, 0.1, 0.0, −0.05 → squares .25, .09, .01, 0, .0025;
    # mean of all 0.0705 ≥ 0.04; without .25: 0.025625 < 0.04 → one token leaves (the 0.5)
    old = torch.zeros(1, 6, dtype=torch.float64)
    rollout = _row(0.5, -0.3, 0.1, 0.0, -0.05, 4.0)
    mask = _row(1.0, 1.0, 1.0, 1.0, 1.0, 0.0)
    keep, metrics = m2po_keep(old, rollout, mask, threshold=0.04)
    assert keep[0].tolist() == [0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    assert metrics["m2po/m2"] == pytest.approx(0.0705) and metrics["m2po/m2_after"] == pytest.approx(0.025625)
    assert metrics["m2po/masked_frac"] == pytest.approx(0.2)
    keep, metrics = m2po_keep(old, rollout, mask, threshold=0.02)  # .025625 ≥ .02: the −0.3 leaves too
    assert keep[0].tolist() == [0.0, 0.0, 1.0, 1.0, 1.0, 0.0] and metrics["m2po/masked_frac"] == pytest.approx(0.4)
    keep, _ = m2po_keep(old, rollout, mask, threshold=1e-9)  # never below: all but one leave, as AReaL
    assert keep.sum().item() == 1.0 and keep[0, 3] == 1.0  # the smallest (0) stays


def test_the_importance_corrected_kl_weights_k3_by_the_ratio_to_the_old_policy():
    # u = ref − logp = −0.2: k3 = e^u − u − 1 = 0.018731; π_θ/π_old = e^0.3 = 1.34986 → 0.025284
    logp = _row(-1.0).requires_grad_(True)
    ref, old = _row(-1.2), _row(-1.3)
    k3 = kl_penalty(logp, ref, kind="k3")
    corrected = kl_penalty(logp, ref, kind="k3_is", old_logp=old)
    assert k3.item() == pytest.approx(math.exp(-0.2) + 0.2 - 1)
    assert corrected.item() == pytest.approx((math.exp(-0.2) + 0.2 - 1) * math.exp(0.3))
    corrected.sum().backward()  # the ratio is not detached: d/dlogp [k3·r] = (1 − e^u)·r + k3·r
    r = math.exp(0.3)
    assert logp.grad.item() == pytest.approx((1 - math.exp(-0.2)) * r + (math.exp(-0.2) + 0.2 - 1) * r)
    with pytest.raises(ValueError, match="k3_is needs old_logp"):
        kl_penalty(logp, ref, kind="k3_is")


def _batch(rollout, mask, adv):
    from trainer.objective.types import Batch

    b, t = mask.shape
    zeros = torch.zeros(b, t, dtype=torch.float64)
    return Batch(input_ids=torch.zeros(b, t, dtype=torch.long), attention_mask=torch.ones(b, t),
                 response_start=torch.zeros(b, dtype=torch.long), response_len=torch.full((b,), t),
                 response_ids=torch.zeros(b, t, dtype=torch.long), loss_mask=mask, rollout_logp=rollout,
                 rewards=torch.zeros(b), group_ids=torch.zeros(b, dtype=torch.long), advantages=adv, old_logp=zeros)


def test_the_objective_applies_opsm_to_the_policy_term_and_m2po_to_m_prime():
    from trainer.config.algo_config import AlgoConfig
    from trainer.objective.corrections import prepare_corrections
    from trainer.update import denominators, micro_batch_objective

    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    rollout = torch.tensor([[0.3, 0.3], [0.0, 0.0]], dtype=torch.float64)  # row 0: mean log(μ/π) 0.3 > δ
    adv = torch.tensor([[-1.0], [-1.0]], dtype=torch.float64) * mask
    batch = _batch(rollout, mask, adv)
    logp = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    algo = AlgoConfig(policy_loss="bypass", clip_low=0.5, clip_high=3.0, opsm_delta=0.1)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)
    n_tok, n_seq, _ = denominators(batch, torch.arange(2))
    loss, metrics = micro_batch_objective(algo, batch, logp, torch.zeros_like(logp), n_tokens=n_tok, n_seqs=n_seq)
    loss.backward()
    # row 0 leaves the policy term (no gradient) but stays in the token-mean denominator (4 tokens)
    assert logp.grad[0].tolist() == [0.0, 0.0] and logp.grad[1].tolist() == pytest.approx([0.25, 0.25])
    assert metrics["opsm_masked_seq_frac"] == pytest.approx(0.5)
    # M2PO: the (0.3)² tokens exceed a 0.04 budget over four tokens (mean .045): one leaves m′, and its weight
    m2 = AlgoConfig(m2_threshold=0.04)
    weights, keep, corr_metrics = prepare_corrections(m2, batch)
    assert keep.sum().item() == 3.0 and corr_metrics["rollout_corr/m2po/masked_frac"] == pytest.approx(0.25)
    assert (weights * (1 - keep)).abs().sum().item() == 0.0


@pytest.mark.smoke
def test_opsm_and_the_corrected_kl_run_inside_a_training_step(tmp_path, sft_dir):
    from tiny_tir import SMALL

    from trainer.loop import train
    from trainer.setup.build import build_config

    # the wiring end to end (the tiny model's groups are mostly reward-0, so few negative advantages: the masking
    # itself is checked on a constructed batch above)
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=1",
                                      "algo.opsm_delta=0", "algo.kl_coef=0.01", "algo.kl_type=k3_is",
                                      "rollout.prompts_per_step=2", "rollout.group_size=4"])
    (result,) = train(cfg, show_progress=False)
    m = result.metrics
    assert m["actor/grad_norm_nonfinite"] == 0 and math.isfinite(m["loss/policy"])
    assert 0 <= m["actor/opsm_masked_seq_frac"] <= 1 and m["actor/kl_loss"] >= 0
