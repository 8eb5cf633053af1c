"""LoRA RL (`model.lora`, trainer/runtime/lora.py) on the tiny TIR warm start, with real steps through the loop:
what trains, what a step changes, what the engine samples after a sync, the reference, checkpoints, resume, ALP,
the config's rules and the memory plan.

The tiny model (hidden 64, 2 layers, kv width 32, MLP 128) with r = 8 on the seven decoder linears: each layer has
8·((64+64) + (64+32) + (64+32) + (64+64) + 3·(64+128)) = 8,192 adapter parameters, 16,384 in all. An entropy bonus
gives every step a gradient (the tiny model's rewards are mostly 0); the sampler is fp32, the zero-mismatch setting.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from shipped_configs import data_overrides
from tiny_tir import SMALL

from agents.models import load_model_and_tokenizer, resolve_local
from app.cli import main
from trainer.algorithms import AlgorithmState
from trainer.components import build_components
from trainer.config.errors import ConfigError
from trainer.config.train_config import CONFIG_DIR
from trainer.loop import collect_rollouts, seed_everything, train, train_step
from trainer.objective.logprobs import clean_forward
from trainer.objective.types import collate
from trainer.reference import reference_logprobs
from trainer.runtime.lora import ADAPTER_WEIGHTS, AdaptersOff, trainable_count
from trainer.runtime.memory_plan import format_plan, plan_memory
from trainer.runtime.sampler_mismatch import full_named_parameters
from trainer.setup.build import build_config

pytestmark = pytest.mark.smoke

LORA = ["model.lora.r=8", "rollout.dtype=float32", "algo.entropy_coef=0.01", "optim.lr=1e-3"]
ADAPTERS = 2 * 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 128))  # 16,384 (module docstring)
LORA_GATE_BOUND = 2e-5
"""Max |log π_trainer − log μ| over the sampled tokens after a sync, fp32 on both sides. The project's gate is 1e-5
(tests/agents/test_zero_mismatch.py); a merged engine computes (W + (α/r)·B·A)·x where the trainer computes
W·x + (α/r)·B·(A·x), which round differently: on 120 random tokens the two differ by 1.3e-5, as far as each is
from fp64 (measured 1.32e-5 and 1.28e-5). Measured on these batches: 3e-6 to 1.1e-5 (transformers, merged),
5e-6 to 7e-6 (vLLM-CPU, both modes; tests/trainer/runtime/test_lora_vllm.py)."""


def _cfg(tmp_path, sft_dir, *extra):
    return build_config(None, [*SMALL, f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", *LORA, *extra])


def _params(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.fixture(scope="module")
def stepped(sft_dir, tmp_path_factory):
    """Components after two loop steps, with the parameters before and after the first."""
    cfg = _cfg(tmp_path_factory.mktemp("stepped"), sft_dir)
    seed_everything(cfg.seed)
    c = build_components(cfg)
    before = _params(c.model)
    train_step(c, cfg, AlgorithmState(), 1)
    after = _params(c.model)
    train_step(c, cfg, AlgorithmState(), 2)
    yield c, cfg, before, after
    c.close()


def test_only_the_adapters_train_and_the_first_policy_is_the_start_model(tmp_path, sft_dir):
    c = build_components(_cfg(tmp_path, sft_dir))
    try:
        trainable = {name for name, p in c.model.named_parameters() if p.requires_grad}
        assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
        assert trainable_count(c.model)[0] == ADAPTERS == sum(
            p.numel() for p in c.model.parameters() if p.requires_grad)
        in_optimizer = {id(p) for g in c.optimizer.param_groups for p in g["params"]}
        assert in_optimizer == {id(p) for p in c.model.parameters() if p.requires_grad}
        start = dict(load_model_and_tokenizer(sft_dir)[0].named_parameters())
        merged = dict(full_named_parameters(c.model))  # what the engine receives: B = 0, so W + 0 exactly
        assert merged.keys() == start.keys()
        assert all(torch.equal(merged[k], start[k]) for k in start)
    finally:
        c.close()


def test_a_grpo_step_changes_every_adapter_weight_and_no_base_weight(stepped):
    _, _, before, after = stepped
    adapters = [n for n in before if ".lora_" in n]
    assert len(adapters) == 2 * 7 * 2  # A and B of 7 layers in 2 decoder layers
    # B starts at 0, so A's gradient is 0 on the first mini-batch; the second mini-batch moves it
    assert [n for n in adapters if torch.equal(before[n], after[n])] == []
    assert [n for n in before if ".lora_" not in n and not torch.equal(before[n], after[n])] == []


def test_engine_log_probs_after_a_sync_equal_the_trainers(stepped):
    """The zero-mismatch gate, merged sync (the transformers engine): the engine samples after two synced updates
    and the trainer's log-probs of its tokens agree; with the adapters off they do not (the gate sees the update)."""
    c, cfg, _, _ = stepped
    batch = collate(collect_rollouts(c, cfg, 3), c.tokenizer.pad_token_id)
    mask = batch.loss_mask > 0
    logp = clean_forward(c.model, batch, 1.0, 8)[0]
    off = reference_logprobs(AdaptersOff(c.model), batch, 1.0, 8)
    diff, moved = (logp - batch.rollout_logp).abs()[mask], (off - batch.rollout_logp).abs()[mask]
    print(f"LoRA merged sync: max |dlogp| {diff.max():.2e} over {int(mask.sum())} tokens; adapters off {moved.max():.2e}")
    assert diff.max() <= LORA_GATE_BOUND < 100 * LORA_GATE_BOUND < moved.max()


def test_the_reference_is_the_start_model_with_its_adapters_off(tmp_path, sft_dir):
    cfg = _cfg(tmp_path, sft_dir, "algo.kl_coef=0.05")
    seed_everything(cfg.seed)
    c = build_components(cfg)
    try:
        assert isinstance(c.reference, AdaptersOff)
        assert not list(c.reference.named_modules())[1:] and not c.reference._parameters  # no copy of its own
        batch = collate(collect_rollouts(c, cfg, 1), c.tokenizer.pad_token_id)
        start = load_model_and_tokenizer(sft_dir)[0]
        expected = clean_forward(start, batch, 1.0, 8)[0]
        assert torch.equal(reference_logprobs(c.reference, batch, 1.0, 8), expected)
        result = train_step(c, cfg, AlgorithmState(), 1)
        assert result.metrics["actor/grad_norm_nonfinite"] == 0
        assert torch.equal(reference_logprobs(c.reference, batch, 1.0, 8), expected)  # the anchor stays
        assert not torch.equal(clean_forward(c.model, batch, 1.0, 8)[0], expected)  # while the policy moved
        assert c.model.training  # the reference pass leaves the policy in training mode
    finally:
        c.close()


@pytest.fixture(scope="module")
def lora_run(sft_dir, tmp_path_factory):
    """Two steps, a checkpoint after each, the merged export requested."""
    out = tmp_path_factory.mktemp("lora_run")
    results = train(_cfg(out, sft_dir, "steps=2", "save_every=1", "model.lora.export_merged=true"),
                    show_progress=False)
    return out, results


def test_checkpoints_hold_the_adapters_and_the_merged_export_on_request(lora_run, sft_dir):
    from peft import PeftModel

    out, _ = lora_run
    ckpt = out / "checkpoints" / "step_2"
    assert {"adapter_config.json", ADAPTER_WEIGHTS, "trainer_state.pt", "alprl_config.yaml"} <= {
        p.name for p in ckpt.iterdir()}
    assert not (ckpt / "model.safetensors").exists()  # no base weights
    assert set(load_file(ckpt / ADAPTER_WEIGHTS)) and all(".lora_" in k for k in load_file(ckpt / ADAPTER_WEIGHTS))
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert sum(s["exp_avg"].numel() for s in state["optimizer"]["state"].values()) == ADAPTERS
    base, tok = load_model_and_tokenizer(sft_dir)
    policy = PeftModel.from_pretrained(base, str(ckpt)).eval()  # peft reads the checkpoint as its own
    merged, _ = load_model_and_tokenizer(ckpt / "merged")  # a plain Hugging Face model
    ids = torch.tensor([tok("Compute 123 * 456.\n```python\nprint(123 * 456)\n```")["input_ids"]])
    with torch.no_grad():
        a, b = policy(input_ids=ids).logits.log_softmax(-1), merged(input_ids=ids).logits.log_softmax(-1)
        with policy.disable_adapter():
            start = policy(input_ids=ids).logits.log_softmax(-1)
    assert (a - b).abs().max() <= LORA_GATE_BOUND < (a - start).abs().max()
    with pytest.raises(FileNotFoundError, match="LoRA adapters only.*merged"):
        resolve_local(ckpt)


def test_resume_is_exact(lora_run, sft_dir, tmp_path):
    out, uninterrupted = lora_run
    train(_cfg(tmp_path, sft_dir, "steps=1", "save_every=1"), show_progress=False)
    (resumed,) = train(_cfg(tmp_path, sft_dir, "steps=2", "save_every=1"), resume=True, show_progress=False)
    a, b = uninterrupted[1].metrics, resumed.metrics
    for key in ("rollout/reward", "rollout/sampled_tokens", "loss/policy", "actor/grad_norm",
                "rollout_corr/logp_abs_diff_max"):
        assert a[key] == b[key], key
    wa = load_file(out / "checkpoints" / "step_2" / ADAPTER_WEIGHTS)
    wb = load_file(tmp_path / "checkpoints" / "step_2" / ADAPTER_WEIGHTS)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_alp_perturbs_the_decoder_layers_under_the_adapters(tmp_path, sft_dir):
    (result,) = train(_cfg(tmp_path, sft_dir, "algorithm=token_alp", "steps=1", "save_every=1",
                           "perturb.sigma_mode=relative", "perturb.sigma_init=0.01"), show_progress=False)
    m = result.metrics
    assert {f"perturb/sigma/layer_{i}" for i in (0, 1)} <= m.keys()
    assert m["perturb/grad_log_sigma_norm"] > 0 and m["actor/grad_norm_nonfinite"] == 0
    assert m["perturb/rel_noise_mean"] == pytest.approx(0.01, rel=0.2)  # the hooks reached h through the wrapper


@pytest.mark.parametrize("preset", ["token_mis", "seq_alp", "mipu", "sprpo", "icepop"])
def test_corrections_and_companion_methods_train_with_adapters(preset, tmp_path, sft_dir):
    """A correction, ALP's perturbed forward, MIPU's snapshot and rollback, SPrPO's per-layer probe: one step each."""
    more = ("perturb.sprpo_adaptive=true", "perturb.learnable=false") if preset == "sprpo" else ()
    (result,) = train(_cfg(tmp_path, sft_dir, f"algorithm={preset}", "steps=1", "save_every=1",
                           "rollout.prompts_per_step=2", *more), show_progress=False)
    assert result.metrics["actor/grad_norm_nonfinite"] == 0 and result.metrics["actor/grad_norm"] > 0
    assert (tmp_path / "checkpoints" / "step_1" / ADAPTER_WEIGHTS).is_file()


def test_the_samplers_quantized_and_lagged_views_apply_to_the_merged_weights(tmp_path, sft_dir):
    results = train(_cfg(tmp_path, sft_dir, "steps=2", "save_every=2", "rollout.sampler_quant=int8",
                         "rollout.policy_lag=1"), show_progress=False)
    first, second = (r.metrics for r in results)
    assert first["mismatch/sampler_quant_rel_err"] > 1e-3  # every decoder linear found under its engine name
    assert (first["mismatch/policy_lag_effective"], second["mismatch/policy_lag_effective"]) == (0.0, 1.0)


@pytest.mark.parametrize("override,message", [
    ("model.lora.r=-1", "model.lora.r=-1"),
    ("model.lora.alpha=0", "model.lora.alpha=0"),
    ("model.lora.dropout=1.0", "model.lora.dropout=1.0"),
    ("model.lora.sync=lazy", "model.lora.sync='lazy'; valid: auto, merged, adapter"),
])
def test_bad_lora_values_are_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_config(None, ["model.lora.r=8", override])


def test_adapter_sync_needs_vllm_and_whole_weight_views_need_merged(tmp_path, sft_dir, capsys):
    with pytest.raises(ConfigError, match="needs vLLM's adapters"):
        build_config(None, ["model.lora.r=8", "model.lora.sync=adapter", "rollout.engine=hf"])
    with pytest.raises(ConfigError, match="rollout.policy_lag=1: the sampler's views are of whole weights"):
        build_config(None, ["model.lora.r=8", "model.lora.sync=adapter", "rollout.engine=vllm",
                            "rollout.policy_lag=1"])
    code = main(["train", "--no-progress", *SMALL, f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}",
                 "model.lora.r=8", "model.lora.target_modules=q_proj,nonexistent_proj", "steps=0"])
    err = capsys.readouterr().err
    assert code == 2 and "model.lora.target_modules=['q_proj', 'nonexistent_proj']" in err


def test_the_sync_choice_is_printed_once(tmp_path, sft_dir, capsys):
    build_components(_cfg(tmp_path, sft_dir)).close()
    lines = [line for line in capsys.readouterr().err.splitlines() if "model.lora.sync" in line]
    assert lines == ["alprl: LoRA r=8 alpha=32 on q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj: 0.02M of "
                     "0.12M parameters train; model.lora.sync=auto chose merged (the transformers engine samples "
                     "with merged weights)"]


def test_the_dry_run_plan_shows_lora_beside_full_fine_tuning(tmp_path):
    recipe = CONFIG_DIR / "tir_qwen2.5_7b.yaml"
    cfg = build_config(recipe, [*data_overrides(recipe, tmp_path), "model.lora.r=64", "algo.kl_coef=0.001"])
    plan = plan_memory(cfg)
    full = plan.full
    assert plan.lora_rank == 64 and full is not None and full.lora_rank == 0
    # Qwen2.5-7B: 28 layers × 64 × Σ(in + out) over its 7 linears (q 3584+3584, k/v 3584+512, o 3584+3584,
    # gate/up 3584+18944, down 18944+3584) = 161,480,704
    assert plan.adapter_params == 28 * 64 * (2 * 7168 + 2 * 4096 + 3 * 22528) == 161_480_704
    rows = {r.name: r for r in plan.rows}
    assert rows["reference model"].update == 0 < {r.name: r for r in full.rows}["reference model bf16"].update
    assert plan.update_peak < full.update_peak and plan.fits and full.fits
    text = format_plan(plan)
    assert "full fine-tuning" in text and "LoRA r=64" in text and "161.5 M adapter parameters" in text
    assert text.splitlines()[-1].startswith("LoRA: ") and "; full fine-tuning: " in text.splitlines()[-1]
    print(text)


def test_lora_and_full_runs_share_one_warm_start(sft_dir):
    """model.lora is not part of the SFT cache key: a LoRA run starts from the warm start full runs use."""
    from trainer.sft.cache import sft_fingerprint

    meta = json.loads((sft_dir / "sft_meta.json").read_text())
    cfg = build_config(None, [*SMALL, f"sft.output_dir={sft_dir}", "model.lora.r=8"])
    assert sft_fingerprint(cfg) == meta["fingerprint"]
