"""VCPO (trainer/algorithms/vcpo.py): the ESS ratio and its learning-rate factor by hand, the factor applied through
the optimizer for one step and taken back, and the off-policy optimal baseline in the advantage stage."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_update import prepared_batch, tiny_model

from trainer.algorithms.vcpo import ess_lr_scale, ess_ratio, lr_multiplier, scaled_lr, sequence_log_weights
from trainer.components import build_optimizer
from trainer.config.errors import ConfigError
from trainer.loop import compute_advantages
from trainer.objective.advantages import group_advantages
from trainer.objective.types import Batch
from trainer.setup.build import build_config
from trainer.update import UpdateSettings, optimizer_step, update_policy

LN2 = math.log(2.0)


def test_the_preset_is_the_papers_setting():
    a = build_config(None, ["algorithm=vcpo"]).algo
    assert (a.vcpo_lr_rule, a.vcpo_base_ess, a.advantage, a.adv_norm_by_std) == ("sqrt", 1.0, "opob", True)
    assert (a.policy_loss, a.correction, a.corr_level, a.corr_upper, a.loss_agg) == (
        "ppo_clip", "tis", "seq", 8.0, "seq-mean-token-mean")
    assert (a.clip_low, a.clip_high, a.clip_dual) == (1.0, 1e9, 1e9)  # its scripts: no clip that acts
    assert build_config(None, ["algorithm=grpo"]).algo.vcpo_lr_rule == "none"  # off everywhere else


def test_sequence_weights_and_the_ess_ratio_by_hand():
    # log w_b = Σ_t m (old − rollout): row 0 [0.5, 0.2] → 0.7; row 1 [ln 2, (tool token), −inf on a masked token]
    old = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -3.0, float("-inf")]])
    rollout = torch.tensor([[-1.5, -1.2, -9.0], [-1.0 - LN2, 0.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    assert torch.allclose(sequence_log_weights(old, rollout, mask), torch.tensor([0.7, LN2]))
    # w = [1, 2, 4]: ρ = (Σ w)² / (N·Σ w²) = 7² / (3·21) = 49/63 = 0.777778; one row left out: w = [1, 4] → 25/34
    log_w = torch.tensor([0.0, LN2, 2 * LN2])
    assert ess_ratio(log_w, torch.tensor([True, True, True])) == pytest.approx(49 / 63)
    assert ess_ratio(log_w, torch.tensor([True, False, True])) == pytest.approx(25 / 34)
    assert ess_ratio(log_w, torch.tensor([False, False, False])) == 1.0  # no episode: no scaling
    assert ess_ratio(torch.zeros(4), torch.ones(4, dtype=torch.bool)) == pytest.approx(1.0)  # on-policy: w ≡ 1
    # over two ranks the sums are global: a `batch_sum` that doubles them (two identical ranks) keeps ρ
    assert ess_ratio(log_w, torch.ones(3, dtype=torch.bool), batch_sum=lambda t: 2 * t) == pytest.approx(49 / 63)


def test_lr_multiplier_is_the_square_root_rule_below_the_base_ratio():
    # ρ = 0.25: sqrt √min(1, 0.25/1) = 0.5, linear 0.25; ρ0 0.5: √(0.25/0.5) = 0.707107; ρ ≥ ρ0: 1
    assert lr_multiplier(0.25, "sqrt", 1.0) == pytest.approx(0.5)
    assert lr_multiplier(0.25, "linear", 1.0) == pytest.approx(0.25)
    assert lr_multiplier(0.25, "sqrt", 0.5) == pytest.approx(math.sqrt(0.5))
    assert lr_multiplier(0.6, "sqrt", 0.55) == 1.0 and lr_multiplier(0.1, "none", 1.0) == 1.0
    with pytest.raises(ValueError, match="sqrt"):
        lr_multiplier(0.5, "cubic", 1.0)


def test_scaled_lr_sets_every_group_for_the_block_and_restores_the_configured_lr():
    params = [torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))]
    optimizer = torch.optim.SGD([{"params": [params[0]], "lr": 1e-3}, {"params": [params[1]], "lr": 4e-4}])
    with scaled_lr(optimizer, 0.5) as metrics:
        assert [g["lr"] for g in optimizer.param_groups] == [5e-4, 2e-4] and metrics == {"actor/lr": 5e-4}
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 4e-4]
    with pytest.raises(RuntimeError), scaled_lr(optimizer, 0.1):  # an error inside still puts them back
        raise RuntimeError
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 4e-4]
    with scaled_lr(optimizer, None) as metrics:  # VCPO off: nothing touched, nothing logged
        assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 4e-4] and metrics == {}


def test_optimizer_step_takes_the_step_at_the_scaled_lr():
    # SGD, lr 0.1, gradient 1, scale 0.5: θ = 1 − 0.1·0.5·1 = 0.95, the lr back at 0.1 afterwards
    p = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones(1)
    settings = UpdateSettings(build_config(None, ["algorithm=vcpo"]).algo, temperature=1.0, micro_batch_size=1,
                              grad_clip=10.0)
    step, extra = optimizer_step(optimizer, 0.0, settings, lr_scale=0.5)
    assert p.item() == pytest.approx(0.95) and optimizer.param_groups[0]["lr"] == 0.1
    assert extra["actor/lr"] == pytest.approx(0.05) and step["actor/grad_norm_nonfinite"] == 0.0
    _, extra = optimizer_step(optimizer, 0.0, settings)  # no scale: no lr metric either
    assert "actor/lr" not in extra


def test_update_policy_steps_at_the_ess_scaled_lr_of_its_mini_batch():
    """The ESS-scaled step is the plain step at lr·√ρ: same weights after it, the configured lr back."""
    cfg = build_config(None, ["algorithm=vcpo"])
    rows = torch.arange(8)
    runs = {}
    for rule in ("sqrt", "none"):
        model = tiny_model()
        batch = prepared_batch(model, cfg, 3)
        optimizer = build_optimizer(model, cfg)
        algo = build_config(None, ["algorithm=vcpo", f"algo.vcpo_lr_rule={rule}"]).algo
        settings = UpdateSettings(algo, temperature=1.0, micro_batch_size=3, grad_clip=1.0)
        if rule == "none":  # the same step with the optimizer's lr set by hand to lr·√ρ
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * runs["sqrt"][0]["actor/lr_scale"]
        metrics = update_policy(model, optimizer, batch, rows, settings)
        runs[rule] = metrics, {k: v.detach().clone() for k, v in model.named_parameters()}, optimizer
    metrics, weights, optimizer = runs["sqrt"]
    log_w = sequence_log_weights(batch.old_logp, batch.rollout_logp, batch.corr_keep)
    w = log_w.double().exp()
    rho = (w.sum() ** 2 / (len(w) * w.square().sum())).item()  # (Σ w)² / (N Σ w²) over the 8 episodes
    assert 0 < rho < 1 and metrics["actor/ess_ratio"] == pytest.approx(rho, rel=1e-9)
    assert metrics["actor/lr_scale"] == pytest.approx(math.sqrt(rho), rel=1e-9)
    assert metrics["actor/lr"] == pytest.approx(cfg.optim.lr * math.sqrt(rho), rel=1e-9)
    assert optimizer.param_groups[0]["lr"] == cfg.optim.lr  # the schedule's value is back
    assert all(torch.allclose(v, runs["none"][1][k], atol=1e-7) for k, v in weights.items())
    assert "actor/ess_ratio" not in runs["none"][0]


def test_ess_lr_scale_is_off_unless_a_rule_is_set():
    cfg = build_config(None, ["algorithm=grpo"])
    batch = prepared_batch(tiny_model(), cfg, 4)
    assert ess_lr_scale(cfg.algo, batch, torch.arange(8)) == (None, {})


# ------------------------------------------------------------------------------------------ the optimal baseline


def test_optimal_baseline_hand_computed():
    # one group, R = [1, 0, 0], w = [1, 2, 1] → w² = [1, 4, 1]: b = (1·1 + 4·0 + 1·0)/6 = 1/6
    # centred [5/6, −1/6, −1/6], divided by the unbiased std of R, √(1/3) = 0.577350 → [1.443376, −0.288675, −0.288675]
    # GRPO's mean 1/3 would give [1.154701, −0.577350, −0.577350]: the heavy episode pulls the baseline to its reward
    rewards, groups = torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long)
    log_w = torch.tensor([0.0, LN2, 0.0])
    adv, _ = group_advantages(rewards, groups, log_weights=log_w)
    assert torch.allclose(adv, torch.tensor([1.443376, -0.288675, -0.288675]), atol=1e-5)
    # unnormalized (Dr.GRPO-style): R − b
    adv, _ = group_advantages(rewards, groups, log_weights=log_w, norm_by_std=False)
    assert torch.allclose(adv, torch.tensor([5 / 6, -1 / 6, -1 / 6]), atol=1e-6)
    # w ≡ 1 (on-policy) is GRPO exactly; a flat group is 0 whatever the weights
    same, _ = group_advantages(rewards, groups, log_weights=torch.zeros(3))
    assert torch.equal(same, group_advantages(rewards, groups)[0])
    flat, metrics = group_advantages(torch.ones(3), groups, log_weights=log_w)
    assert torch.equal(flat, torch.zeros(3)) and metrics["adv/degenerate_group_frac"] == 1.0
    with pytest.raises(ValueError, match="leave-one-out"):
        group_advantages(rewards, groups, log_weights=log_w, leave_one_out=True)


def test_the_advantage_stage_uses_the_batchs_sequence_weights():
    # two groups of two; group 0's episodes have w = [1, 3] (old − rollout summed: 0 and ln 3), rewards [1, 0]:
    # b = (1·1 + 9·0)/10 = 0.1 → centred [0.9, −0.1], std √0.5 → [1.272792, −0.141421]; group 1 on-policy is GRPO's
    mask = torch.ones(4, 2)
    old = torch.full((4, 2), -1.0)
    rollout = old - torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0], [0.0, 0.0], [0.0, 0.0]])
    batch = Batch(input_ids=torch.zeros(4, 3, dtype=torch.long), attention_mask=torch.ones(4, 3),
                  response_start=torch.ones(4, dtype=torch.long), response_len=torch.full((4,), 2),
                  response_ids=torch.zeros(4, 2, dtype=torch.long), loss_mask=mask, rollout_logp=rollout,
                  rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]), group_ids=torch.tensor([0, 0, 1, 1]), old_logp=old)
    members = torch.ones(4, dtype=torch.bool)
    adv, _ = compute_advantages(batch, build_config(None, ["algorithm=vcpo"]), [], members)
    grpo = 0.5 / math.sqrt(0.5)  # group 1: R = [0, 1], centred ±0.5 over the same std
    assert torch.allclose(adv[:, 0], torch.tensor([0.9 / math.sqrt(0.5), -0.1 / math.sqrt(0.5), -grpo, grpo]),
                          atol=1e-5)
    assert torch.equal(adv[:, 0], adv[:, 1])  # broadcast over the sampled tokens
    # MIPU's validation batch (per_episode) keeps GRPO's own advantages
    per_episode, _ = compute_advantages(batch, build_config(None, ["algorithm=vcpo"]), [], members, per_episode=True)
    assert torch.allclose(per_episode[:2, 0], torch.tensor([grpo, -grpo]), atol=1e-5)


@pytest.mark.parametrize("override,key", [
    ("algo.vcpo_lr_rule=cubic", "algo.vcpo_lr_rule"),
    ("algo.vcpo_base_ess=0", "algo.vcpo_base_ess"),
    ("algo.vcpo_base_ess=1.5", "algo.vcpo_base_ess"),
    ("algo.adv_leave_one_out=true", "algo.adv_leave_one_out"),
    ("algo.vespo_k_pos=-1", "algo.vespo_k_pos"),
    ("algo.ctpo_clip_low=0", "algo.ctpo_clip_low"),
])
def test_bad_offpolicy_keys_raise_one_line_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        build_config(None, ["algorithm=vcpo", override])
