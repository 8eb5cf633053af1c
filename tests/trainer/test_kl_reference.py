"""KL to a frozen reference (algo.kl_coef): the loss term and the reward penalty by hand, and tiny real runs."""

from __future__ import annotations

import math

import pytest
import torch
from loss_batches import response_batch
from tiny_tir import SMALL

from trainer.config.algo_config import AlgoConfig
from trainer.loop import train
from trainer.objective.corrections import prepare_corrections
from trainer.reference import kl_reward_penalty
from trainer.runtime.logger import read_metrics
from trainer.setup.build import build_config
from trainer.update import micro_batch_objective

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
OLD = torch.tensor([[-1.0, -0.5, 0.0], [-0.3, -1.1, -2.0]])
REF = torch.tensor([[-1.2, -0.5, 9.0], [-0.1, -1.6, -2.0]])  # 9.0 sits on a masked position
LOGP = OLD + torch.tensor([[0.1, -0.2, 0.0], [0.0, 0.3, 0.1]])


def _loss(**algo):
    batch = response_batch(OLD, OLD, MASK, torch.tensor([[1.0], [-1.0]]) * MASK)
    batch.ref_logp = REF
    cfg = AlgoConfig(**algo)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(cfg, batch)
    loss, metrics = micro_batch_objective(cfg, batch, LOGP, torch.zeros_like(LOGP), n_tokens=MASK.sum(),
                                          n_seqs=torch.tensor(2.0))
    return loss.item(), metrics


@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "low_var_kl"])
def test_kl_loss_term_is_beta_times_the_token_mean_of_the_estimator(kind):
    base, _ = _loss()
    with_kl, metrics = _loss(kl_coef=0.1, kl_type=kind)
    d = (LOGP - REF)[MASK > 0].tolist()  # log π_θ − log π_ref on the 5 sampled tokens
    per_token = {"k1": d, "k2": [0.5 * x * x for x in d],
                 "k3": [math.exp(-x) + x - 1 for x in d], "low_var_kl": [math.exp(-x) + x - 1 for x in d]}[kind]
    expected = sum(per_token) / len(per_token)
    assert metrics["kl_loss"] == pytest.approx(expected, rel=1e-6)
    assert with_kl - base == pytest.approx(0.1 * expected, rel=1e-5)


def test_no_kl_term_in_the_loss_when_it_goes_into_the_reward():
    assert _loss(kl_coef=0.1, kl_in_reward=True)[0] == pytest.approx(_loss()[0])
    assert "kl_loss" not in _loss(kl_coef=0.1, kl_in_reward=True)[1]


def test_kl_reward_penalty_subtracts_beta_times_the_episode_sum():
    batch = response_batch(OLD, OLD, MASK, torch.zeros(2, 3))
    batch.rewards, batch.ref_logp = torch.tensor([1.0, 0.0]), REF
    rewards, metrics = kl_reward_penalty(AlgoConfig(kl_coef=0.5, kl_type="k1"), batch)
    sums = [(-1.0 + 1.2) + 0.0, (-0.3 + 0.1) + (-1.1 + 1.6) + 0.0]  # k1 = old − ref, masked tokens left out
    assert rewards.tolist() == pytest.approx([1.0 - 0.5 * sums[0], 0.0 - 0.5 * sums[1]])
    assert metrics["rollout/kl_penalty"] == pytest.approx(0.5 * sum(sums) / 2)


@pytest.mark.smoke
@pytest.mark.parametrize("in_reward", [False, True])
def test_a_run_with_kl_to_the_start_trains_and_logs_it(tmp_path, sft_dir, in_reward):
    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=2",
                                      "algorithm=seq_alp", "perturb.sigma_init=0.02", "algo.kl_coef=1e-3",
                                      "algo.kl_type=k3", f"algo.kl_in_reward={str(in_reward).lower()}",
                                      "optim.lr=1e-3", "algo.entropy_coef=0.05"])  # moves θ whatever the rewards
    train(cfg, show_progress=False)
    records = read_metrics(tmp_path)
    key = "rollout/kl_ref" if in_reward else "actor/kl_loss"
    values = [r[key] for r in records]
    assert all(math.isfinite(v) and v >= 0 for v in values)
    if in_reward:  # θ_old of step 1 is the start itself: no KL; after an update there is
        assert values[0] == pytest.approx(0.0, abs=1e-7) and values[1] > 0
    else:  # the perturbed forward against the clean start: > 0 from the first mini-batch on
        assert values[0] > 0
    assert all(math.isfinite(r["loss/policy"]) for r in records)


@pytest.mark.smoke
def test_the_single_turn_alp_recipe_trains_with_its_kl_term_on_the_tiny_model(tmp_path, sft_dir):
    # configs/math_qwen2.5_math_1.5b.yaml as shipped (β = 1e-3, k3), Token-ALP with the single-turn σ values,
    # on stand-in data files and the tiny warm start instead of Qwen2.5-Math-1.5B and a GPU
    from shipped_configs import data_overrides

    from trainer.config.train_config import CONFIG_DIR

    recipe = CONFIG_DIR / "math_qwen2.5_math_1.5b.yaml"
    cfg = build_config(recipe, ["algorithm=token_alp", "perturb.sigma_init=0.02", "perturb.lr=1e-2",
                                "algo.clip_dual=10", *data_overrides(recipe, tmp_path), f"model.path={sft_dir}",
                                f"output_dir={tmp_path / 'run'}", "steps=1", "eval_tasks=0", "rollout.engine=hf",
                                "rollout.dtype=float32", "rollout.prompts_per_step=2", "rollout.group_size=2",
                                "rollout.max_new_tokens=16", "rollout.max_response_tokens=16", "rollout.max_model_len=0",
                                "optim.micro_batch_size=4", "optim.num_minibatches=1"])
    assert (cfg.algo.kl_coef, cfg.algo.kl_type) == (1e-3, "k3")
    train(cfg, show_progress=False)
    record = read_metrics(tmp_path / "run")[0]
    assert record["actor/kl_loss"] > 0 and math.isfinite(record["loss/policy"])  # the perturbed forward vs the start
