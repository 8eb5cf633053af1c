"""Two gloo ranks under FSDP2 train like one process on the same global batch (real torch.distributed, CPU).

Each rank holds half of the GRPO groups; the one-process reference updates the whole batch. Tolerance: 1e-5 relative
on the loss and grad norm, and 2e-6 absolute on every updated weight, 0.2% of the step itself (lr 1e-3; AdamW's
first step is at most lr per weight), since float summation order differs: the micro-batches and the all-reduce add
in another order (measured: GRPO 1e-8, Seq-ALP 1.2e-7 at most). Under Seq-ALP the ranks draw other noise (seeded per
rank and micro-batch) than the one process does, and the sequence-level loss feels it: at σ = 1e-6 two noise draws
move the loss by ~1e-5 (measured), more than the tolerance. So σ0 = 1e-9 here, under fp32's resolution of h, where
the draw cannot matter; the whole ALP path still runs (hooks, log σ gradients summed over ranks, its AdamW step),
and the log σ after the step must be identical on both ranks.
"""

from __future__ import annotations

import copy
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import Qwen2Config, Qwen2ForCausalLM

from agents.perturbation import LayerwisePerturbation
from agents.trajectory import Trajectory
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.corrections import prepare_corrections
from trainer.objective.logprobs import old_logprobs
from trainer.objective.types import collate
from trainer.runtime.distributed import DistContext, shard_policy
from trainer.runtime.sampler_mismatch import full_named_parameters
from trainer.setup.build import build_config
from trainer.update import UpdateSettings, update_policy

GROUPS, GROUP_SIZE, WORLD = 4, 4, 2


def tiny_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg).train()


def global_batch(model):
    """GROUPS × GROUP_SIZE trajectories of varied lengths with observation tokens, rollout log-probs off by noise."""
    gen = torch.Generator().manual_seed(1)
    trajs = []
    for i in range(GROUPS * GROUP_SIZE):
        n = int(torch.randint(6, 20, (1,), generator=gen))
        mask = (torch.rand(n, generator=gen) > 0.25).long().tolist()
        trajs.append(Trajectory(prompt_ids=torch.randint(1, 128, (5,), generator=gen).tolist(),
                                response_ids=torch.randint(1, 128, (n,), generator=gen).tolist(), loss_mask=mask,
                                rollout_logprobs=[0.0] * n, reward=float(torch.rand((), generator=gen) > 0.5),
                                group_id=i // GROUP_SIZE))
    batch = collate(trajs, pad_id=0)
    batch.old_logp = old_logprobs(model, batch, 1.0, 4)
    batch.rollout_logp = (batch.old_logp + 0.05 * torch.randn(batch.old_logp.shape, generator=gen)) * batch.loss_mask
    adv, _ = group_advantages(batch.rewards, batch.group_ids)
    batch.advantages = broadcast_advantages(adv, batch.loss_mask)
    return batch


def one_step(preset: str, ctx: DistContext, rows: torch.Tensor, *extra: str):
    """One optimizer step of `preset` on `rows` of the global batch; (metrics, weights, log σ or None)."""
    cfg = build_config(None, [f"algorithm={preset}", "optim.micro_batch_size=3", *extra])
    model = tiny_model()
    batch = global_batch(model)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(cfg.algo, batch)
    pert = LayerwisePerturbation(model, layers="all", sigma_init=1e-9, learnable=True, logits_only=False,
                                 sigma_mode="absolute") if cfg.perturb.enabled else None
    model = shard_policy(model, cfg, ctx)
    groups = [{"params": list(model.parameters())}]
    groups += [pert.param_group(lr=5e-4, weight_decay=0.01)] if pert else []
    # eps 1e-4: AdamW's first step is lr·g/(|g| + eps), whose slope in g, lr·eps/(|g| + eps)², reaches lr/eps as g
    # goes to 0, so a weight with a tiny gradient turns a summation-order difference of g into a larger one of the
    # step. The k_proj biases' gradient is exactly zero (softmax ignores a shift of the keys), theirs is summation
    # noise ~1e-10: with the default eps 1e-8 that is a ±lr step of either sign; at eps 1e-6 (slope up to 1,000) one
    # o_proj weight of the Seq-ALP run stepped 3.7e-6 apart on an AVX-512/AMX CPU; at 1e-4 the slope is at most 10.
    opt = torch.optim.AdamW(groups, lr=1e-3, eps=1e-4)
    local = batch.select(rows)
    settings = UpdateSettings(cfg.algo, temperature=1.0, micro_batch_size=cfg.optim.micro_batch_size, grad_clip=0.5,
                              ctx=ctx)
    metrics = update_policy(model, opt, local, torch.arange(len(rows)), settings, perturbation=pert, noise_base=7)
    weights = {name: t.detach().clone() for name, t in full_named_parameters(model)}
    return metrics, weights, (pert.log_sigma.detach().clone() if pert else None)


def rank_main(rank: int, port: int, preset: str, out: dict, extra: tuple[str, ...] = ()) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        ctx = DistContext(rank=rank, world_size=WORLD, fsdp=True)
        per_rank = GROUPS * GROUP_SIZE // WORLD
        metrics, weights, log_sigma = one_step(preset, ctx, torch.arange(rank * per_rank, (rank + 1) * per_rank),
                                               *extra)
        out[rank] = (metrics["loss/policy"], metrics["actor/grad_norm"], weights, log_sigma)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("preset", ["grpo", "seq_alp"])
def test_two_ranks_equal_one_process_on_the_global_batch(preset):
    metrics, weights, _ = one_step(preset, DistContext(), torch.arange(GROUPS * GROUP_SIZE))
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_main, args=(free_port(), preset, out), nprocs=WORLD, join=True)
        ranks = dict(copy.deepcopy(out))
    for rank in range(WORLD):
        loss, grad_norm, rank_weights, log_sigma = ranks[rank]
        assert loss == pytest.approx(metrics["loss/policy"], rel=1e-5, abs=1e-7)
        assert grad_norm == pytest.approx(metrics["actor/grad_norm"], rel=1e-5)
        assert rank_weights.keys() == weights.keys()
        for name, tensor in weights.items():
            torch.testing.assert_close(rank_weights[name], tensor, rtol=0, atol=2e-6, msg=name)
    if preset == "seq_alp":  # one σ per layer, the same on every rank after the step
        assert torch.equal(ranks[0][3], ranks[1][3])
    assert metrics["actor/grad_norm"] > 0.5  # the clip acted: the global norm, not a rank's, was clipped to


def test_bf16_compute_with_activation_checkpointing_tracks_the_fp32_step():
    # FSDP2's MixedPrecisionPolicy (bf16 forward/backward, fp32 master weights and reductions) and per-layer
    # recomputation: the step follows one fp32 process's up to bf16 rounding of the activations
    metrics, weights, _ = one_step("grpo", DistContext(), torch.arange(GROUPS * GROUP_SIZE))
    extra = ("distributed.mixed_precision=bf16", "distributed.activation_checkpointing=true")
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_main, args=(free_port(), "grpo", out, extra), nprocs=WORLD, join=True)
        ranks = dict(copy.deepcopy(out))
    loss, grad_norm, rank_weights, _ = ranks[0]
    assert loss == pytest.approx(metrics["loss/policy"], rel=0.05)
    assert grad_norm == pytest.approx(metrics["actor/grad_norm"], rel=0.05)
    start = {name: p.detach() for name, p in tiny_model().named_parameters()}
    fp32_step = torch.cat([(weights[k] - start[k]).flatten() for k in weights])
    bf16_step = torch.cat([(rank_weights[k] - start[k]).flatten() for k in weights])
    assert all(rank_weights[k].dtype == torch.float32 for k in weights)  # fp32 master weights
    # AdamW's first step is ±lr per weight, so rounding flips the sign of the near-zero gradients; the step as a
    # whole must still point where the fp32 step points
    assert torch.nn.functional.cosine_similarity(fp32_step, bf16_step, dim=0) > 0.9
    assert all(torch.equal(ranks[0][2][k], ranks[1][2][k]) for k in weights)  # the ranks agree exactly


def sprpo_rank(rank: int, port: int, out: dict) -> None:
    """SPrPO's allocation on an FSDP model, each rank probing its own half of the batch."""
    from trainer.algorithms.sprpo import Allocator

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        cfg = build_config(None, ["algorithm=sprpo", "perturb.sprpo_adaptive=true", "perturb.learnable=false"])
        ctx = DistContext(rank=rank, world_size=WORLD, fsdp=True)
        model = tiny_model()
        batch = global_batch(model)
        pert = LayerwisePerturbation(model, layers="all", sigma_init=1e-3, learnable=False, logits_only=False,
                                     sigma_mode="absolute")
        model = shard_policy(model, cfg, ctx)
        per_rank = GROUPS * GROUP_SIZE // WORLD
        local = batch.select(torch.arange(rank * per_rank, (rank + 1) * per_rank))
        allocator = Allocator()
        metrics = allocator.maybe_allocate(model, pert, local, cfg, 1, ctx)
        out[rank] = (pert.sigmas().clone(), allocator.gain, metrics["perturb/sprpo_kl"])
    finally:
        dist.destroy_process_group()


def test_sprpo_allocates_the_same_sigmas_on_every_rank():
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(sprpo_rank, args=(free_port(), out), nprocs=WORLD, join=True)
        ranks = dict(copy.deepcopy(out))
    (s0, g0, kl0), (s1, g1, kl1) = ranks[0], ranks[1]
    assert torch.equal(s0, s1) and g0 == g1 and kl0 == kl1  # averaged measurements, one decision
    assert (s0 > 0).all() and not torch.allclose(s0, torch.full_like(s0, 1e-3))  # σ was reallocated


def batch_norm_rank(rank: int, port: int, out: dict) -> None:
    from trainer.objective.corrections import prepare_corrections

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        ctx = DistContext(rank=rank, world_size=WORLD)
        cfg = build_config(None, ["algorithm=token_mis", "algo.corr_batch_norm=true"])
        batch = global_batch(tiny_model())
        per_rank = GROUPS * GROUP_SIZE // WORLD
        local = batch.select(torch.arange(rank * per_rank, (rank + 1) * per_rank))
        weights, keep, metrics = prepare_corrections(cfg.algo, local, batch_sum=ctx.all_reduce_sum)
        out[rank] = (weights, metrics["rollout_corr/rollout_is_batch_norm_factor"])
    finally:
        dist.destroy_process_group()


def test_batch_normalized_weights_use_the_global_batch_mean():
    from trainer.objective.corrections import prepare_corrections

    cfg = build_config(None, ["algorithm=token_mis", "algo.corr_batch_norm=true"])
    batch = global_batch(tiny_model())
    whole, _, metrics = prepare_corrections(cfg.algo, batch)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(batch_norm_rank, args=(free_port(), out), nprocs=WORLD, join=True)
        ranks = dict(copy.deepcopy(out))
    per_rank = GROUPS * GROUP_SIZE // WORLD
    for rank, (weights, factor) in ranks.items():
        assert factor == pytest.approx(metrics["rollout_corr/rollout_is_batch_norm_factor"], rel=1e-6)
        mine = whole[rank * per_rank: (rank + 1) * per_rank, : weights.shape[1]]
        torch.testing.assert_close(weights, mine, rtol=1e-6, atol=1e-7)
