"""QUATRO [R]: per-query duals against brute force, the limits of λ, the stabilized loss and its fixed point."""

import math

import pytest
import torch

from trainer.algorithms.quatro import (
    dual_objective,
    group_matrix,
    kl_to_uniform,
    quatro_targets,
    realized_kl_metrics,
    solve_duals,
    target_log_ratios,
)
from trainer.objective.corrections import prepare_corrections
from trainer.objective.losses import aggregate, get_policy_loss
from trainer.objective.types import Batch
from trainer.setup.build import build_config
from trainer.update import denominators, micro_batch_objective

LAM_MIN, LAM_MAX = 1e-4, 1e4
BOUNDS = {"quatro_log_ratio_clamp": 5.0, "quatro_grpo_scale": True}  # configs/algorithms/quatro.yaml


def _random_groups(q=24, g=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    binary = (torch.rand(q // 2, g, generator=gen) < 0.4).double()  # 0/1 rewards as in TIR
    smooth = torch.rand(q - q // 2, g, generator=gen, dtype=torch.float64) * 3
    rewards = torch.cat([binary, smooth])
    return rewards - rewards.mean(-1, keepdim=True), torch.ones(q, g, dtype=torch.bool)


@pytest.mark.parametrize("delta", [0.01, 0.05, 0.3])
def test_duals_match_a_brute_force_grid_search(delta):
    adv, valid = _random_groups(seed=int(delta * 100))
    lam, status = solve_duals(adv, valid, delta, LAM_MIN, LAM_MAX)
    grid = torch.logspace(math.log10(LAM_MIN), math.log10(LAM_MAX), 40_001, dtype=torch.float64)  # (N,)
    # g(λ) = λδ + λ·log mean_i e^{A_i/λ} on the whole grid at once, (Q, N)
    g_grid = grid * delta + grid * (torch.logsumexp(adv[:, None, :] / grid[None, :, None], -1) - math.log(8))
    best = g_grid.argmin(1)  # (Q,)
    live = ~status["degenerate"]
    assert live.sum() >= len(adv) - 2
    g_solved = dual_objective(adv, valid, lam, delta)
    # the solution is never worse than the best grid point, and sits next to it (grid step 2.3e-4 in ln λ)
    assert (g_solved[live] <= g_grid.min(1).values[live] + 1e-9).all()
    assert torch.allclose(lam[live].log(), grid[best][live].log(), atol=2e-3)
    bound = ~(status["inactive"] | status["clamped_low"] | status["clamped_high"]) & live
    assert torch.allclose(kl_to_uniform(adv, valid, lam)[bound], torch.full_like(lam[bound], delta), atol=1e-9)


def test_inactive_constraint_and_clamps():
    # A = [1, 1, 1, 0] − 0.75: #argmax = 3 of G = 4 → the largest reachable KL is log(4/3) = 0.28768
    adv = torch.tensor([[0.25, 0.25, 0.25, -0.75]], dtype=torch.float64)
    valid = torch.ones(1, 4, dtype=torch.bool)
    lam, status = solve_duals(adv, valid, 0.3, LAM_MIN, LAM_MAX)  # δ ≥ log(4/3): inactive → λ_min
    assert status["inactive"].item() and lam.item() == LAM_MIN
    lam, status = solve_duals(adv, valid, 0.2, LAM_MIN, LAM_MAX)  # binds
    assert not status["inactive"].item() and LAM_MIN < lam.item() < LAM_MAX
    lam, status = solve_duals(adv, valid, 1e-20, LAM_MIN, LAM_MAX)  # root beyond λ_max → clamped
    assert status["clamped_high"].item() and lam.item() == LAM_MAX
    # inactive: the targets put all mass on the argmax samples, log(G/#argmax) each, the rest at the clamp
    t = target_log_ratios(adv, valid, torch.tensor([LAM_MIN], dtype=torch.float64), clamp=5.0)
    assert torch.allclose(t, torch.tensor([[math.log(4 / 3)] * 3 + [-5.0]], dtype=torch.float64))


def test_small_budget_recovers_std_normalized_advantages():
    adv, valid = _random_groups(q=10, g=8, seed=3)
    delta = 1e-6
    lam, _ = solve_duals(adv, valid, delta, LAM_MIN, 1e8)
    std_pop = adv.std(-1, unbiased=False)  # (Q,)
    assert torch.allclose(lam, std_pop / math.sqrt(2 * delta), rtol=1e-2)  # λ ≈ std(A)/√(2δ)
    effective = target_log_ratios(adv, valid, lam, clamp=5.0) / math.sqrt(2 * delta)  # what the loss applies
    assert torch.allclose(effective, adv / std_pop[:, None], atol=1e-2)
    # GRPO's (Bessel) std differs by √(G/(G−1)) only
    grpo = adv / adv.std(-1, keepdim=True)
    assert torch.allclose(effective * math.sqrt(7 / 8), grpo, atol=1e-2)


def _one_token_rows(target):
    """logp (B, 1) as a free parameter at θ_old (old = logp at start), advantages = targets."""
    old = -torch.rand(len(target), 1, generator=torch.Generator().manual_seed(0)) - 0.5
    return old.clone().requires_grad_(True), old, torch.ones(len(target), 1), target[:, None].float()


def test_lambda_to_infinity_makes_the_update_vanish():
    adv, valid = _random_groups(q=4, g=8, seed=5)
    loss_fn = get_policy_loss("quatro")
    for lam_value, moves in [(1e12, False), (1.0, True)]:
        t = target_log_ratios(adv, valid, torch.full((4,), lam_value, dtype=torch.float64), clamp=5.0).reshape(-1)
        logp, old, mask, target = _one_token_rows(t)
        opt = torch.optim.SGD([logp], lr=0.1)
        for _ in range(20):
            opt.zero_grad()
            loss, _ = loss_fn(logp, old, old, target, mask, upd_level="token", quatro_delta=0.02, **BOUNDS)
            aggregate(loss, mask, "seq-mean-token-mean").backward()
            opt.step()
        moved = (logp - old).abs().max().item()
        assert (moved > 1e-2) if moves else (moved < 1e-9)


def test_stabilized_loss_hand_computed():
    # δ = 0.02 → τ = 1/√0.04 = 5. Token 0: t = 0.3, log r = 0.5 (overshoot): r = e^0.5 = 1.648721,
    # f(r) = r·0.5 − r + 1 = 0.175639; ℓ = −5·(1.648721·0.3 − 0.175639) = −1.594887;
    # ∂ℓ/∂logp = −5·r·(t − log r) = −5·1.648721·(−0.2) = +1.648721 (pulls log r back toward t).
    # Token 1: t = −0.4, log r = 0: r = 1, f = 0 → ℓ = −5·(−0.4) = 2.0; ∂ℓ/∂logp = −5·(−0.4) = 2.0.
    logp = torch.tensor([[0.5], [0.0]], requires_grad=True)
    old = torch.zeros(2, 1)
    adv = torch.tensor([[0.3], [-0.4]])
    loss, metrics = get_policy_loss("quatro")(logp, old, old, adv, torch.ones(2, 1), upd_level="token",
                                              quatro_delta=0.02, **BOUNDS)
    assert torch.allclose(loss, torch.tensor([[-1.594887], [2.0]]), atol=1e-5)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[1.648721], [2.0]]), atol=1e-5)
    assert metrics["quatro_overshoot_frac"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="quatro_delta"):
        get_policy_loss("quatro")(logp, old, old, adv, torch.ones(2, 1), upd_level="token", quatro_delta=0.0,
                                  **BOUNDS)


def test_fixed_point_is_the_exact_trust_region_solution():
    # minimizing the loss drives log r to t = log(G·w_λ); the reweighted samples then have KL(ŵ‖U) = δ
    adv, valid = _random_groups(q=3, g=6, seed=7)
    delta = 0.03
    lam, status = solve_duals(adv, valid, delta, LAM_MIN, LAM_MAX)
    assert not (status["inactive"] | status["clamped_low"] | status["clamped_high"]).any()
    t = target_log_ratios(adv, valid, lam, clamp=5.0).reshape(-1)
    logp, old, mask, target = _one_token_rows(t)
    opt = torch.optim.Adam([logp], lr=0.02)
    for _ in range(600):
        opt.zero_grad()
        loss, _ = get_policy_loss("quatro")(logp, old, old, target, mask, upd_level="token", quatro_delta=delta,
                                            **BOUNDS)
        aggregate(loss, mask, "seq-mean-token-mean").backward()
        opt.step()
    assert torch.allclose((logp - old).detach().squeeze(-1), t.float(), atol=2e-3)


def _batch(rewards, groups, t=3):
    b = len(rewards)
    mask = torch.ones(b, t)
    mask[0, 2] = 0.0
    return Batch(input_ids=torch.zeros(b, t + 1, dtype=torch.long), attention_mask=torch.ones(b, t + 1),
                 response_start=torch.ones(b, dtype=torch.long), response_len=torch.full((b,), t),
                 response_ids=torch.zeros(b, t, dtype=torch.long), loss_mask=mask,
                 rollout_logp=torch.zeros(b, t), rewards=torch.tensor(rewards), group_ids=torch.tensor(groups),
                 old_logp=-torch.rand(b, t, generator=torch.Generator().manual_seed(1)))


def test_quatro_targets_batch_end_to_end_and_realized_kl():
    # groups 0 and 2 informative, group 1 degenerate (all rewards equal) → its rows get weight 0
    batch = _batch([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.5], [0, 0, 0, 1, 1, 1, 2, 2, 2])
    algo = build_config(None, ["algorithm=quatro"]).algo
    batch.quatro_targets, metrics = quatro_targets(algo, batch)
    assert batch.advantages is None  # the targets have their own field
    assert metrics["quatro/degenerate_frac"] == pytest.approx(1 / 3)
    assert metrics["quatro/solved_kl_over_delta"] == pytest.approx(1.0, abs=1e-6)
    assert (batch.quatro_targets[3:6] == 0).all() and (batch.quatro_targets[[0, 1, 2, 6, 7, 8]].abs().sum(-1) > 0).all()
    assert (batch.quatro_targets[0, 2] == 0)  # masked token
    mat, _, _ = group_matrix(batch.quatro_targets[:, 0].double(), batch.group_ids)
    assert mat[0, 0] > 0 > mat[0, 1] and mat[0, 1] == mat[0, 2]  # winner up, losers equally down
    logp = (batch.old_logp + 0.1 * torch.randn(batch.old_logp.shape)).requires_grad_(True)
    rows = torch.arange(len(batch))
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)
    n_tokens, n_seqs, _ = denominators(batch, rows)
    loss, loss_metrics = micro_batch_objective(algo, batch, logp, torch.zeros_like(logp), n_tokens=n_tokens,
                                               n_seqs=n_seqs)
    loss.backward()
    assert math.isfinite(loss.item()) and (logp.grad[3:6] == 0).all() and logp.grad[:3].abs().sum() > 0
    assert math.isfinite(loss_metrics["quatro_kl"])
    # at the exact solution (geo log r = t on every row) the realized per-query KL equals δ
    reached = batch.old_logp + batch.quatro_targets[:, :1]
    realized = realized_kl_metrics(algo, batch, reached)
    assert realized["quatro/realized_kl_max"] == pytest.approx(algo.quatro_delta, rel=1e-4)
    assert realized["quatro/realized_kl_min"] == pytest.approx(0.0, abs=1e-9)  # the degenerate group stays put
