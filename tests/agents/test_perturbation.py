"""ALP layerwise perturbation on a real (tiny) Qwen2 model: exactness, gradients, hooks, seeding, export."""

import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from agents.perturbation import LayerwisePerturbation, decoder_layers, noise_seed, parse_layers
from trainer.config.algo_config import PerturbConfig
from trainer.objective.losses import aggregate, get_policy_loss


def _alp(model, **settings):
    """A perturbation with the run config's `perturb.*` defaults, `settings` replacing some."""
    p = PerturbConfig()
    defaults = {"layers": p.layers, "sigma_init": p.sigma_init, "learnable": p.learnable, "logits_only": p.logits_only,
                "sigma_mode": p.sigma_mode}
    return LayerwisePerturbation(model, **(defaults | settings))


def _model(dtype=torch.float32, layers=2):
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64)
    return Qwen2ForCausalLM(cfg).to(dtype).train()


IDS = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(1))


def _logp(model):
    """log π of the next token at every position, (3, 8)."""
    logits = model(input_ids=IDS).logits[:, :-1]  # model dtype: float64 for the finite-difference test
    return logits.log_softmax(-1).gather(-1, IDS[:, 1:, None]).squeeze(-1)


def _no_hooks(model):
    return all(not layer._forward_pre_hooks for layer in decoder_layers(model)) and \
        not model.get_output_embeddings()._forward_hooks


def test_sigma_zero_is_exactly_the_unperturbed_forward():
    model = _model()
    clean = model(input_ids=IDS).logits
    pert = _alp(model, sigma_init=0.0, learnable=False)
    with pert.active(seed=noise_seed(7)):
        assert torch.equal(model(input_ids=IDS).logits, clean)


@pytest.mark.parametrize("config_cls,model_cls", [(Qwen2Config, Qwen2ForCausalLM), (Qwen3Config, Qwen3ForCausalLM),
                                                    (LlamaConfig, LlamaForCausalLM)])
def test_works_on_qwen2_qwen3_llama(config_cls, model_cls):
    torch.manual_seed(0)
    model = model_cls(config_cls(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 num_key_value_heads=1, intermediate_size=64)).train()
    clean = model(input_ids=IDS).logits
    with _alp(model, sigma_init=0.0, learnable=False).active(seed=0):
        assert torch.equal(model(input_ids=IDS).logits, clean)
    pert = _alp(model, sigma_init=0.1)
    with pert.active(seed=0):
        noisy = model(input_ids=IDS).logits
        noisy.pow(2).mean().backward()
    assert not torch.allclose(noisy, clean) and (pert.log_sigma.grad != 0).all() and _no_hooks(model)


def test_sigma_to_zero_converges_to_the_unperturbed_forward():
    model = _model()
    clean = model(input_ids=IDS).logits
    gaps = []
    for sigma in (1e-1, 1e-3, 1e-5):
        with _alp(model, sigma_init=sigma).active(seed=3):
            gaps.append((model(input_ids=IDS).logits - clean).abs().max().item())
    assert gaps[0] > gaps[1] > gaps[2] > 0 and gaps[2] < 1e-3


def _float64_alp(mode):
    """(perturbation at σ0 0.05 on a float64 model, the advantage-weighted loss under its noise of seed 5)."""
    model = _model(torch.float64)
    pert = _alp(model, sigma_init=0.05, sigma_mode=mode).double()
    adv = torch.tensor([[1.0], [-1.0], [0.5]]).double()

    def loss_at(seed=5):
        with pert.active(seed=seed):
            return -(adv * _logp(model)).mean()

    return pert, loss_at


def _central_difference(pert, loss_at, layer, h=1e-3):
    """(L(s_l + h) − L(s_l − h)) / 2h, log σ restored after."""
    with torch.no_grad():
        pert.log_sigma[layer] += h
        up = loss_at().item()
        pert.log_sigma[layer] -= 2 * h
        down = loss_at().item()
        pert.log_sigma[layer] += h
    return (up - down) / (2 * h)


def test_log_sigma_receives_the_gradient_of_the_loss():
    # autograd's ∂L/∂s_l (noise regenerated in backward) matches a central finite difference in float64
    # (HF's RMSNorm computes in fp32, hence h = 1e-3 and rel 1e-3; a missing σ factor would be 20× off)
    pert, loss_at = _float64_alp("absolute")
    loss_at().backward()
    grad = pert.log_sigma.grad.clone()
    assert (grad != 0).all()
    for layer in range(2):
        assert grad[layer].item() == pytest.approx(_central_difference(pert, loss_at, layer), rel=1e-3)
    assert pert.metrics()["perturb/grad_log_sigma_norm"] == pytest.approx(grad.norm().item())


def test_hooks_are_removed_on_exit_and_on_exception():
    model = _model()
    pert = _alp(model, sigma_init=0.1)
    with pert.active(seed=1):
        assert all(len(layer._forward_pre_hooks) == 1 for layer in decoder_layers(model))
        with pytest.raises(RuntimeError, match="already"):
            with pert.active(seed=2):
                pass
    assert _no_hooks(model)
    with pytest.raises(ZeroDivisionError):
        with pert.active(seed=1):
            raise ZeroDivisionError("inside the context")
    assert _no_hooks(model)
    clean = model(input_ids=IDS).logits  # after exit the model is unperturbed again
    assert torch.equal(model(input_ids=IDS).logits, clean)


def test_checkpoints_never_contain_perturbation_parameters(tmp_path):
    model = _model()
    keys = set(model.state_dict())
    pert = _alp(model, sigma_init=0.1)
    with pert.active(seed=1):
        _logp(model).sum().backward()
    assert set(model.state_dict()) == keys
    assert not any(p is pert.log_sigma for p in model.parameters())
    assert set(pert.state_dict()) == {"log_sigma"}
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert not [k for k in saved if "sigma" in k or "perturb" in k]
    assert set(saved) <= keys


def test_noise_same_seed_same_noise_other_seed_different():
    model = _model()
    pert = _alp(model, sigma_init=0.1)
    runs = {}
    for seed in (noise_seed(0), noise_seed(0), noise_seed(1)):
        with pert.active(seed=seed):
            runs.setdefault(seed, []).append(model(input_ids=IDS).logits.detach())
            again = model(input_ids=IDS).logits.detach()  # re-seeded per layer call, not a continuing stream
            assert torch.equal(again, runs[seed][-1])
    assert torch.equal(*runs[noise_seed(0)])
    assert not torch.allclose(runs[noise_seed(0)][0], runs[noise_seed(1)][0])


@pytest.mark.parametrize("mode", ["hf_layers", "whole_forward"])
def test_recomputation_under_checkpointing_sees_identical_noise(mode):
    # hf_layers: HF activation checkpointing of each decoder layer (hooks outside the checkpoint in
    # transformers 5). whole_forward: torch checkpoint around the whole model, so the backward re-runs
    # every hook and must redraw the same noise, as older transformers did.
    results = []
    for checkpointing in (False, True):
        model = _model()
        if checkpointing and mode == "hf_layers":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        pert = _alp(model, sigma_init=0.2)
        with pert.active(seed=noise_seed(4)):
            if checkpointing and mode == "whole_forward":
                logp = torch.utils.checkpoint.checkpoint(_logp, model, use_reentrant=False)
            else:
                logp = _logp(model)
            logp.mean().backward()
        results.append((logp.detach(), pert.log_sigma.grad.clone(), model.model.embed_tokens.weight.grad.clone()))
    (a, sa, ea), (b, sb, eb) = results
    assert torch.equal(a, b)
    assert torch.allclose(sa, sb, rtol=1e-5, atol=1e-7) and torch.allclose(ea, eb, rtol=1e-5, atol=1e-7)


def test_layer_subsets_and_parsing():
    assert parse_layers("all", 4) == [0, 1, 2, 3]
    assert parse_layers("0-1,3", 4) == [0, 1, 3]
    assert parse_layers([2], 4) == [2]
    for bad in ("4", "2-1", "a-b", ""):
        with pytest.raises(ValueError, match="perturb.layers"):
            parse_layers(bad, 4)
    model = _model(layers=3)
    pert = _alp(model, layers="1-2", sigma_init=0.1)
    with pert.active(seed=0):
        assert [len(layer._forward_pre_hooks) for layer in decoder_layers(model)] == [0, 1, 1]
        _logp(model).mean().backward()
    assert pert.log_sigma.shape == (2,) and (pert.log_sigma.grad != 0).all()
    assert set(k for k in pert.metrics() if k.startswith("perturb/sigma/")) == {
        "perturb/sigma/layer_1", "perturb/sigma/layer_2"}


def test_logits_only_variant():
    model = _model()
    clean = model(input_ids=IDS).logits
    pert = _alp(model, sigma_init=0.5, logits_only=True)
    with pert.active(seed=2):
        noisy = model(input_ids=IDS).logits
        noisy.float().pow(2).mean().backward()
    assert _no_hooks(model)
    noise = (noisy - clean).detach() / 0.5  # z̃ = z + σ·ε, ε ~ N(0, 1)
    assert abs(noise.std().item() - 1.0) < 0.1 and pert.log_sigma.grad.abs().item() > 0
    assert "perturb/sigma/logits" in pert.metrics()


def test_effective_fraction_reveals_bf16_rounding():
    # σ0 = 1e-6 rounds back to h under bf16 (reference §3.5 caveat 1) but not in fp32
    fracs = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = _model(dtype)
        pert = _alp(model, sigma_init=1e-6)
        with pert.active(seed=0):
            model(input_ids=IDS)
        fracs[dtype] = pert.metrics()["perturb/effective_frac"]
    assert fracs[torch.float32] > 0.9 and fracs[torch.bfloat16] < 0.1


def test_param_group_and_validation():
    model = _model()
    pert = _alp(model, sigma_init=0.02)
    opt = torch.optim.AdamW([{"params": list(model.parameters())}, pert.param_group(lr=1e-2, weight_decay=0.01)],
                            lr=1e-3)
    assert opt.param_groups[1]["lr"] == 1e-2 and opt.param_groups[1]["params"][0] is pert.log_sigma
    with pert.active(seed=0):
        _logp(model).mean().backward()
    before = pert.log_sigma.detach().clone()
    opt.step()
    assert not torch.equal(before, pert.log_sigma.detach())
    assert pert.metrics()["perturb/sigma_mean"] == pytest.approx(math.exp(pert.log_sigma.mean().item()), rel=0.05)
    with pytest.raises(ValueError, match="fixed"):
        _alp(model, sigma_init=0.1, learnable=False).param_group(lr=1e-3, weight_decay=0.01)
    with pytest.raises(ValueError, match="sigma_init"):
        _alp(model, sigma_init=0.0, learnable=True)


def test_noise_is_the_seeded_draw_whatever_ran_before():
    # ε_l is randn from a fresh Generator seeded seed + l: the kept per-device generator is re-seeded before
    # every draw (never a continuing stream), so another seed in between or a backward changes nothing
    model = _model(torch.float64)
    pert = _alp(model, sigma_init=0.1).double()
    layers = decoder_layers(model)
    clean, noisy = {}, {}
    handles = [layers[i].register_forward_pre_hook(  # registered first: runs before the noise hook, sees h
        lambda mod, args, i=i: clean.__setitem__(i, args[0].detach().clone())) for i in range(2)]
    handles += [layers[i].input_layernorm.register_forward_pre_hook(  # inside the layer: sees h̃
        lambda mod, args, i=i: noisy.setdefault(i, []).append(args[0].detach().clone())) for i in range(2)]
    for seed in (noise_seed(3), noise_seed(4), noise_seed(3)):
        with pert.active(seed=seed):
            _logp(model).mean().backward()
            if seed == noise_seed(3) and len(noisy[0]) == 1:
                for i in range(2):
                    eps = torch.randn(clean[i].shape, generator=torch.Generator().manual_seed(seed + i),
                                      dtype=torch.float64)
                    assert torch.allclose(noisy[i][0] - clean[i], pert.sigmas()[i] * eps, rtol=0, atol=1e-12)
    for handle in handles:
        handle.remove()
    for i in range(2):
        assert torch.equal(noisy[i][0], noisy[i][2]) and not torch.allclose(noisy[i][0], noisy[i][1])


def test_kept_noise_on_cpu_gives_the_regenerated_gradient(monkeypatch):
    # CPU keeps ε for backward, accelerators redraw it: both paths give the same ∂L/∂s (and the same logits)
    import agents.perturbation as module

    draws = []
    real = module._noise
    monkeypatch.setattr(module, "_noise", lambda like, seed, gen: draws.append(seed) or real(like, seed, gen))
    model = _model(torch.float64)
    pert = _alp(model, sigma_init=0.05).double()
    with pert.active(seed=9):
        _logp(model).mean().backward()
    kept, grad_kept = len(draws), pert.log_sigma.grad.clone()
    assert kept == 2  # one draw per layer: the backward did not redraw

    # the accelerator path (CUDA-only in use) forced on CPU: same seed, so the redrawn ε is the forward's
    monkeypatch.setattr(module, "_keeps_noise", lambda h: False)
    pert.log_sigma.grad = None
    with pert.active(seed=9):
        _logp(model).mean().backward()
    assert len(draws) == kept + 4  # forward and backward draw for each layer
    assert torch.allclose(pert.log_sigma.grad, grad_kept, rtol=1e-12, atol=0)


def test_effective_fraction_samples_the_first_micro_batch_after_each_metrics_call():
    model = _model(torch.bfloat16)
    pert = _alp(model, sigma_init=1e-6)
    with pert.active(seed=0):
        model(input_ids=IDS)
    checked_once = pert._checked
    with pert.active(seed=1):  # later micro-batches of the same step skip the check
        model(input_ids=IDS)
    assert checked_once > 0 and pert._checked == checked_once
    assert pert.metrics()["perturb/effective_frac"] < 0.1
    with pert.active(seed=2):  # a new step checks again
        model(input_ids=IDS)
    assert pert._checked == checked_once


def _wide_model(hidden: int):
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=2 * hidden)
    return Qwen2ForCausalLM(cfg).train()


LONG_IDS = torch.randint(0, 64, (8, 32), generator=torch.Generator().manual_seed(2))  # 256 tokens


def _measured_relative_noise(model, pert, seed=4):
    """rms(h̃ − h)/rms(h) per token at layer 0's input (the embedding, the same with and without noise),
    measured by hooks of the test's own, averaged over tokens."""
    seen = {}
    layer0 = decoder_layers(model)[0]

    def record(module, args, kwargs):
        seen["h"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

    with layer0.register_forward_pre_hook(record, with_kwargs=True):
        model(input_ids=LONG_IDS)
    clean = seen["h"]
    with pert.active(seed=seed), layer0.register_forward_pre_hook(record, with_kwargs=True):  # runs after the noise
        model(input_ids=LONG_IDS)
    return ((seen["h"] - clean).pow(2).mean(-1).sqrt() / clean.pow(2).mean(-1).sqrt()).mean().item()


@pytest.mark.parametrize("hidden", [32, 256])
def test_relative_sigma_is_that_share_of_the_hidden_state_on_any_width(hidden):
    # σ0 = 0.01 in relative mode adds noise of 1% of rms(h) per token on a narrow and a wide model, while the
    # same absolute σ0 means a different share on each (their hidden-state scales differ)
    model = _wide_model(hidden)
    pert = _alp(model, sigma_init=0.01, sigma_mode="relative")
    assert _measured_relative_noise(model, pert) == pytest.approx(0.01, rel=0.05)
    metrics = pert.metrics()
    for layer in range(2):
        assert metrics[f"perturb/rel_noise/layer_{layer}"] == pytest.approx(0.01, rel=0.05)
    assert metrics["perturb/sigma/layer_0"] == pytest.approx(0.01)  # σ itself is the relative scale

    absolute = _alp(model, sigma_init=0.01)
    with absolute.active(seed=4):
        model(input_ids=LONG_IDS)
    rms0 = model.get_input_embeddings()(LONG_IDS).pow(2).mean(-1).sqrt()  # (8, 32) layer 0's rms(h)
    realized = absolute.metrics()["perturb/rel_noise/layer_0"]
    assert realized == pytest.approx((0.01 / rms0).mean().item(), rel=0.05)


@pytest.mark.parametrize("level", ["token", "seq"])
@pytest.mark.parametrize("mode", ["absolute", "relative"])
def test_zero_sigma_is_bit_identical_to_the_unperturbed_loss_in_both_modes(mode, level):
    # same batch, same clip: ALP with σ ≡ 0 is Bypass exactly (Token-/Seq-ALP against Token-/Seq-Bypass)
    rollout = _logp(_model()).detach() + 0.05
    mask = torch.ones_like(rollout)
    adv = torch.tensor([[1.0], [-1.0], [0.5]]) * mask
    loss_fn = get_policy_loss("bypass")
    grads = []
    for perturbed in (False, True):
        model = _model()
        pert = _alp(model, sigma_init=0.0, learnable=False, sigma_mode=mode)
        with pert.active(seed=11) if perturbed else torch.enable_grad():
            per_token, _ = loss_fn(_logp(model), rollout, rollout, adv, mask, upd_level=level, clip_low=0.5,
                                   clip_high=3.0, clip_dual=3.0)
            loss = aggregate(per_token, mask, "token-mean")
            loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1], strict=True))


def test_relative_log_sigma_gradient_matches_finite_differences_on_both_paths(monkeypatch):
    # ∂L/∂s_l with the rms factor: autograd (CPU keeps the scaled noise) = the redrawing accelerator path =
    # a central finite difference in float64 for the last layer. rms(h) is detached by design, so for an earlier
    # layer the difference also moves the rms of the layers after it, which the gradient leaves out on purpose.
    import agents.perturbation as module

    pert, loss_at = _float64_alp("relative")
    loss_at().backward()
    grad = pert.log_sigma.grad.clone()
    last = 1
    assert (grad != 0).all() and grad[last].item() == pytest.approx(_central_difference(pert, loss_at, last), rel=1e-3)
    monkeypatch.setattr(module, "_keeps_noise", lambda h: False)  # the CUDA-only path, forced on CPU
    pert.log_sigma.grad = None
    loss_at().backward()
    assert torch.allclose(pert.log_sigma.grad, grad, rtol=1e-12, atol=0)


def test_an_unknown_sigma_mode_is_refused():
    with pytest.raises(ValueError, match="sigma_mode='percent'.*absolute, relative"):
        _alp(_model(), sigma_init=0.01, sigma_mode="percent")
