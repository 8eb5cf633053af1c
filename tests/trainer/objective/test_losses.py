"""Loss registry: hand-computed values and registry-wide properties."""

import functools
import inspect
import math

import pytest
import torch
import yaml

from trainer.config.algo_config import AlgoConfig
from trainer.config.train_config import CONFIG_DIR
from trainer.objective.corrections import compute_correction
from trainer.objective.losses import (
    AGG_MODES,
    POLICY_LOSSES,
    aggregate,
    get_policy_loss,
    kl_penalty,
    ppo_clip,
)
from trainer.objective.offpolicy_masks import m2po_keep, opsm_keep

# the positional arguments of the registry, the corrections and the masks: tensors only
TENSOR_ARGUMENTS = {"logp", "old_logp", "rollout_logp", "advantages", "mask", "ref_logp"}
# keywords that are data, not hyperparameters: the detached correction weights, π_old for k3_is, the sum over
# data-parallel ranks, which rows make one episode
NOT_HYPERPARAMETERS = {"weights", "old_logp", "batch_sum", "episodes"}


@functools.cache
def preset_algo(name: str) -> AlgoConfig:
    """AlgoConfig as the first preset (configs/algorithms/, by name) that selects loss `name` fills it."""
    for path in sorted((CONFIG_DIR / "algorithms").glob("*.yaml")):
        preset = yaml.safe_load(path.read_text())
        if preset["policy_loss"] == name:
            return AlgoConfig(**{k: v for k, v in preset.items() if k != "perturb"})
    raise KeyError(f"no preset selects policy loss {name!r}")


def required(name, **values):
    """Every hyperparameter of entry `name`, as its preset sets them (the config is their one source), with
    `values` instead where a case states its own."""
    params = inspect.signature(POLICY_LOSSES[name]).parameters.values()
    names = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in NOT_HYPERPARAMETERS]
    unknown = set(values) - set(names)
    assert not unknown, f"{name} takes no {unknown}"
    return {n: values.get(n, getattr(preset_algo(name), n)) for n in names}


@pytest.mark.parametrize("fn", [*POLICY_LOSSES.values(), compute_correction, opsm_keep, m2po_keep, kl_penalty],
                         ids=lambda fn: fn.__name__)
def test_no_hyperparameter_has_a_signature_default(fn):
    # a default in a signature would be a second source beside AlgoConfig (and the presets), one the trainer
    # never reads: every hyperparameter is keyword-only and must be passed
    params = inspect.signature(fn).parameters.values()
    defaulted = [p.name for p in params if p.default is not p.empty and p.name not in NOT_HYPERPARAMETERS]
    positional = [p.name for p in params if p.kind is not p.KEYWORD_ONLY and p.name not in TENSOR_ARGUMENTS]
    assert defaulted == [] and positional == []


def test_the_aggregation_mode_has_no_default():
    mode = inspect.signature(aggregate).parameters["mode"]
    assert mode.default is mode.empty  # algo.loss_agg, passed by the objective


def _inputs(b=3, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3
    logp = (old + 0.3 * torch.randn(b, t, generator=g)).requires_grad_(True)
    rollout = old + 0.05 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    mask = torch.ones(b, t)
    mask[0, 3:] = 0
    return logp, old, rollout, adv, mask


def test_ppo_clip_hand_computed():
    # A = +1, r = e^0.5 = 1.6487 > 1 + 0.28 → clipped: loss = −1·1.28 = −1.28 (no gradient)
    # A = −1, r = e^-0.5 = 0.6065 < 0.8 → clipped side: max(0.6065, 0.8) = 0.8
    # A = −1, r = e^1.5 = 4.4817 > c = 3 → dual clip: min(max(4.48, 1.28), 3) = 3
    # A = +1, r = 1 → −1
    logp = torch.tensor([[0.5, -0.5, 1.5, 0.0]], requires_grad=True)
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4)
    loss, metrics = ppo_clip(logp, old, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_dual=3.0, upd_level="token")
    assert torch.allclose(loss, torch.tensor([[-1.28, 0.8, 3.0, -1.0]]), atol=1e-5)
    loss.sum().backward()
    # only the unclipped token (r = 1, A = +1) has gradient: d(−A·r)/dlogp = −r = −1
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0, 0.0, -1.0]]))
    assert metrics["clip_high"] == pytest.approx(0.25)
    assert metrics["clip_low"] == pytest.approx(0.25)
    assert metrics["clip_dual"] == pytest.approx(0.25)


def test_aggregate_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 2 is empty
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6.0 + 4.0) / 2)
    assert aggregate(loss, mask, "seq-mean-token-sum-norm", norm_len=10).item() == pytest.approx(10 / 2 / 10)
    with pytest.raises(ValueError, match="valid"):
        aggregate(loss, mask, "nope")


def test_token_mean_is_invariant_to_micro_batching():
    loss = torch.rand(4, 6)
    mask = (torch.rand(4, 6) > 0.3).float()
    whole = aggregate(loss, mask, "token-mean")
    n = mask.sum()
    split = aggregate(loss[:2], mask[:2], "token-mean", n_tokens=n) + aggregate(loss[2:], mask[2:], "token-mean",
                                                                           n_tokens=n)
    assert split.item() == pytest.approx(whole.item(), rel=1e-6)


def test_unknown_loss_lists_valid_names():
    with pytest.raises(ValueError, match="ppo_clip"):
        get_policy_loss("does-not-exist")


def test_dual_clip_must_exceed_one():
    logp, old, rollout, adv, mask = _inputs()
    with pytest.raises(ValueError, match="> 1"):
        ppo_clip(logp, old, rollout, adv, mask, **required("ppo_clip", clip_dual=0.9))


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_registry_finite_and_masked(name):
    logp, old, rollout, adv, mask = _inputs()
    loss, metrics = POLICY_LOSSES[name](logp, old, rollout, adv, mask, **required(name))
    assert loss.shape == logp.shape and torch.isfinite(loss).all()
    assert all(math.isfinite(v) for v in metrics.values())
    assert (loss[mask == 0] == 0).all()  # masked tokens contribute nothing
    aggregate(loss, mask, "token-mean").backward()
    assert (logp.grad[mask == 0] == 0).all()


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_registry_zero_advantage_gives_zero_gradient(name):
    logp, old, rollout, adv, mask = _inputs()
    loss, _ = POLICY_LOSSES[name](logp, old, rollout, torch.zeros_like(adv), mask, **required(name))
    aggregate(loss, mask, "token-mean").backward()
    assert torch.count_nonzero(logp.grad) == 0


@pytest.mark.parametrize("mode", [m for m in AGG_MODES if m != "seq-mean-token-sum-norm"])
def test_aggregate_ignores_empty_rows(mode):
    loss = torch.rand(3, 4)
    mask = torch.ones(3, 4)
    with_empty = torch.cat([loss, torch.full((1, 4), 1e6)])
    mask_empty = torch.cat([mask, torch.zeros(1, 4)])
    assert aggregate(with_empty, mask_empty, mode).item() == pytest.approx(aggregate(loss, mask, mode).item())


# ------------------------------------------------------------------ levels, bypass, GSPO, KL, guards


def test_ppo_clip_seq_level_hand_computed():
    # row 0: Δ_upd = [0.1, 0.2] → S = 0.3, r = e^0.3 = 1.3499 on both tokens > 1.28, A = +1 → −1.28, no grad
    # row 1: Δ_upd = [0.05, −0.05] → S = 0, r = 1 on both tokens, A = +1 → −1; ∂(−A·r_bt)/∂logp_bt = −r = −1
    old = torch.zeros(2, 2)
    logp = torch.tensor([[0.1, 0.2], [0.05, -0.05]], requires_grad=True)
    adv = torch.ones(2, 2)
    loss, metrics = ppo_clip(logp, old, old, adv, torch.ones(2, 2), **required("ppo_clip", upd_level="seq"))
    assert torch.allclose(loss, torch.tensor([[-1.28, -1.28], [-1.0, -1.0]]), atol=1e-6)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0], [-1.0, -1.0]]), atol=1e-6)
    assert metrics["clip_high"] == pytest.approx(0.5)


def test_ppo_clip_geo_level_and_masked_padding():
    # row: Δ = [0.4, 0.2, (pad 9.0)] → S̄ = 0.6 / 2 = 0.3, r = e^0.3 = 1.34986 on valid tokens;
    # A = −1: L1 = 1.34986, L2 = −A·clip(r, 0.8, 1.28) = 1.28 → max = 1.34986 (unclipped side), < c = 3
    old = torch.zeros(1, 3)
    logp = torch.tensor([[0.4, 0.2, 9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = ppo_clip(logp, old, old, -torch.ones(1, 3) * mask, mask, **required("ppo_clip", upd_level="geo"))
    assert torch.allclose(loss, torch.tensor([[math.exp(0.3), math.exp(0.3), 0.0]]), atol=1e-5)


def test_bypass_uses_rollout_denominator_hand_computed():
    # token: log r = logp − rollout = [0.1, −1.0]; old_logp is ignored (set to garbage)
    # A = +1: r0 = e^0.1 = 1.10517 inside [0.5, 4] → −1.10517; A = −1: r1 = e^−1 = 0.36788 < 0.5 → max(0.368, 0.5) = 0.5
    logp = torch.tensor([[0.1, -1.0]], requires_grad=True)
    rollout = torch.zeros(1, 2)
    old = torch.full((1, 2), 123.0)
    adv = torch.tensor([[1.0, -1.0]])
    loss, metrics = get_policy_loss("bypass")(logp, old, rollout, adv, torch.ones(1, 2), clip_low=0.5,
                                              clip_high=3.0, clip_dual=3.0, upd_level="token")
    assert torch.allclose(loss, torch.tensor([[-math.exp(0.1), 0.5]]), atol=1e-6)
    assert metrics["clip_low"] == pytest.approx(0.5) and metrics["out_of_band"] == pytest.approx(0.5)


def test_gspo_hand_computed():
    # row 0: Δ = [6e-4, 0] → S̄ = 3e-4, s = e^3e-4 = 1.0003 ∈ [1 − 3e-4, 1 + 4e-4], A = +1 → −1.0003 (grad −s)
    # row 1: Δ = [2e-3, 0] → S̄ = 1e-3, s = 1.001 > 1.0004, A = +1 → clipped: −1.0004, no grad
    # row 2: Δ = [4, 0] → S̄ = 2, s = e^2 = 7.389, A = −1: no dual clip → max(7.389, 0.9997) = 7.389
    # row 3: Δ = [30, 0] → S̄ = 15, bounded at log s = 10 → s = e^10, A = −1 → e^10
    old = torch.zeros(4, 2)
    logp = torch.tensor([[6e-4, 0.0], [2e-3, 0.0], [4.0, 0.0], [30.0, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0], [1.0], [-1.0], [-1.0]]).expand(4, 2)
    loss, _ = get_policy_loss("gspo")(logp, old, old, adv, torch.ones(4, 2), clip_low=3e-4, clip_high=4e-4)
    expected = torch.tensor([[-math.exp(3e-4)] * 2, [-1.0004] * 2, [math.exp(2)] * 2, [math.exp(10)] * 2])
    assert torch.allclose(loss, expected, rtol=1e-5)
    loss[:2].sum().backward()
    assert torch.allclose(logp.grad[0], torch.full((2,), -math.exp(3e-4)), atol=1e-6)
    assert torch.count_nonzero(logp.grad[1]) == 0


def test_weights_multiply_the_per_token_loss():
    # r = 1, A = +1 → ℓ = −1 per token; w = [2, 0.5] → [−2, −0.5]; weights are detached
    logp = torch.zeros(1, 2, requires_grad=True)
    w = torch.tensor([[2.0, 0.5]], requires_grad=True)
    loss, _ = ppo_clip(logp, torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), weights=w,
                       **required("ppo_clip"))
    assert torch.allclose(loss, torch.tensor([[-2.0, -0.5]]))
    loss.sum().backward()
    assert w.grad is None and torch.allclose(logp.grad, torch.tensor([[-2.0, -0.5]]))


def test_kl_penalty_hand_computed():
    # d = logp − ref = [0.5, −1]; k1 = d; k2 = ½d² = [0.125, 0.5];
    # k3: u = ref − logp = [−0.5, 1] → e^u − u − 1 = [0.10653, 0.71828]
    logp, ref = torch.tensor([0.5, -1.0]), torch.zeros(2)
    assert torch.allclose(kl_penalty(logp, ref, kind="k1"), torch.tensor([0.5, -1.0]))
    assert torch.allclose(kl_penalty(logp, ref, kind="mse"), torch.tensor([0.125, 0.5]))
    assert torch.allclose(kl_penalty(logp, ref, kind="low_var_kl"), torch.tensor([0.106531, 0.718282]), atol=1e-5)
    assert kl_penalty(torch.tensor([-40.0]), torch.tensor([0.0]), kind="k3").item() == 10.0  # clamped to [−10, 10]
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(logp, ref, kind="k9")


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_registry_nan_on_masked_tokens_never_leaks(name):
    logp, old, rollout, adv, mask = _inputs()
    old = old.masked_fill(mask == 0, float("nan"))
    rollout = rollout.masked_fill(mask == 0, float("-inf"))
    loss, metrics = POLICY_LOSSES[name](logp, old, rollout, adv, mask, **required(name))
    assert torch.isfinite(loss).all() and all(math.isfinite(v) for v in metrics.values())


FIXED_LEVEL = {"gspo": "geo"}  # entries whose ratio level is not a hyperparameter
UNCLIPPED = {"quatro"}  # exact trust region, no clip by design (tests/trainer/algorithms/test_quatro.py)
UNCLIPPED |= {"vespo"}  # a soft kernel of the sequence ratio instead of a clip (tests/trainer/objective/test_offpolicy_losses.py)
# the clip bounds a stop-gradient weight (CISPO, IS-REINFORCE: a clipped token keeps its gradient) or acts per
# token inside a geometric mean (GMPO): tests/trainer/objective/test_cispo.py checks each by hand
OTHER_CLIP = {"cispo", "is_reinforce", "gmpo"}
# DPPO bounds the probability difference to μ, not the ratio, and SAPO has a soft gate instead of a clip:
# tests/trainer/objective/test_trust_region_losses.py works each out by hand
OTHER_CLIP |= {"dppo_tv", "dppo_kl", "sapo"}
# MinPRO's prefix weight multiplies the clipped loss, CTPO clips a cumulative ratio in log space within bounds that
# grow with the position: tests/trainer/objective/test_offpolicy_losses.py works each out by hand
OTHER_CLIP |= {"minpro", "ctpo"}


@pytest.mark.parametrize("name,level", [(n, lv) for n in sorted(POLICY_LOSSES) if n not in UNCLIPPED | OTHER_CLIP
                                        for lv in ([FIXED_LEVEL[n]] if n in FIXED_LEVEL else ["token", "seq", "geo"])])
def test_registry_clip_boundaries_hit(name, level):
    # every valid token's ratio is e^2 (token/geo) or e^(2·n_b) (seq), far outside any band:
    # A = +1 → all clipped high, no gradient; A = −1 → dual clip (c = 3) where the entry has one
    logp, old, rollout, _, mask = _inputs()
    base = old.detach()
    kwargs = required(name) if name in FIXED_LEVEL else required(name, upd_level=level)  # the preset's ε; c 3
    up = (base + 2.0).requires_grad_(True)
    loss, metrics = POLICY_LOSSES[name](up, base, base, torch.ones_like(mask) * mask, mask, **kwargs)
    aggregate(loss, mask, "token-mean").backward()
    assert metrics["clip_high"] == pytest.approx(1.0) and torch.count_nonzero(up.grad) == 0
    loss_neg, metrics_neg = POLICY_LOSSES[name](up, base, base, -mask, mask, **kwargs)
    if name == "gspo":
        assert metrics_neg["clip_dual"] == 0.0 and (loss_neg[mask > 0] > 3.0).all()
    else:
        assert metrics_neg["clip_dual"] == pytest.approx(1.0)
        assert torch.allclose(loss_neg[mask > 0], torch.tensor(3.0))
