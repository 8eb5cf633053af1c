"""fp16's dynamic loss scaling inside `update_policy` (real torch.distributed on gloo, real FSDP2, CPU).

A tiny Qwen2 policy under FSDP2 with param_dtype fp16, Seq-ALP's learnable log σ beside it (a plain tensor next to
the DTensor parameters, both in the one optimizer), the scaler of `build_grad_scaler`. An overflow is made by
starting from a huge scale: the step is skipped and the scale halved until a step trains. Since a skipped step
leaves everything unchanged, every try sees the same gradients, only scaled differently.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tiny_update import prepared_batch, tiny_model
from torch.distributed.tensor import DTensor

from trainer import update as update_module
from trainer.components import build_optimizer, build_perturbation
from trainer.runtime.distributed import DistContext, build_grad_scaler, shard_policy
from trainer.runtime.sampler_mismatch import full_named_parameters
from trainer.setup.build import build_config
from trainer.update import UpdateSettings, update_policy

HUGE_SCALE = 2.0**24  # the tiny model's fp16 gradients overflow at it (measured: the first scale that trains is 2^16)


class Policy:
    """The sharded tiny model, its ALP noise, optimizer and (fp16) grad scaler, as `build_components` wires them."""

    def __init__(self, ctx: DistContext, *overrides: str) -> None:
        self.cfg = build_config(None, ["algorithm=seq_alp", *overrides])
        model = tiny_model()
        self.batch = prepared_batch(model, self.cfg, 4)
        self.ctx = ctx
        self.model = shard_policy(model, self.cfg, ctx)
        self.perturbation = build_perturbation(self.model, self.cfg)
        self.optimizer = build_optimizer(self.model, self.cfg, self.perturbation)
        self.scaler = build_grad_scaler(self.cfg, ctx)

    def step(self, rows: torch.Tensor | None = None) -> dict[str, float]:
        rows = torch.arange(len(self.batch)) if rows is None else rows
        settings = UpdateSettings(self.cfg.algo, temperature=1.0, micro_batch_size=3, grad_clip=1.0, ctx=self.ctx)
        return update_policy(self.model, self.optimizer, self.batch, rows, settings, perturbation=self.perturbation,
                             noise_base=7, scaler=self.scaler)

    def state(self) -> dict[str, torch.Tensor]:
        weights = {name: t.detach().clone() for name, t in full_named_parameters(self.model)}
        return weights | {"log_sigma": self.perturbation.log_sigma.detach().clone()}


@pytest.fixture
def group_of_one(tmp_path):
    """The process group of one that `init_distributed` makes for fp16 without torchrun."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield DistContext(fsdp=True)
    dist.destroy_process_group()


def test_overflowing_steps_are_skipped_until_the_halved_scale_trains(group_of_one):
    policy = Policy(group_of_one, "distributed.mixed_precision=fp16", f"distributed.fp16_init_scale={HUGE_SCALE}")
    start = policy.state()
    records = []
    while not records or records[-1]["actor/fp16_overflow"]:
        assert len(records) < 25, "the scale never came down to a size fp16 can hold"
        records.append(policy.step())
        if records[-1]["actor/fp16_overflow"]:  # skipped: weights, log σ and optimizer untouched
            assert all(torch.equal(t, start[k]) for k, t in policy.state().items())
            assert not policy.optimizer.state
    overflowed, trained = records[:-1], records[-1]
    assert overflowed, "HUGE_SCALE did not overflow: raise it"
    assert [r["actor/loss_scale"] for r in records] == [HUGE_SCALE / 2**i for i in range(len(records))]
    assert all(r["actor/grad_norm_nonfinite"] == 1.0 and not math.isfinite(r["actor/grad_norm"])
               for r in overflowed)
    assert trained["actor/grad_norm_nonfinite"] == 0.0 and trained["actor/fp16_overflow"] == 0.0
    assert policy.scaler.get_scale() == trained["actor/loss_scale"]  # no growth before 400 clean steps
    # the logged loss is the unscaled one: every try computed the same loss at a different scale
    assert {r["loss/policy"] for r in records} == {trained["loss/policy"]}
    changed = [k for k, t in policy.state().items() if not torch.equal(t, start[k])]
    assert "log_sigma" in changed and len(changed) > 10
    # unscaled before anything reads them: the fp32 step's grad norm and log σ gradient up to fp16 rounding
    # (measured 2e-5 and 4e-4 relative), not 2^16 times them
    fp32 = Policy(group_of_one).step()  # the same FSDP wrapping (ctx.fsdp), fp32 compute
    assert trained["actor/grad_norm"] == pytest.approx(fp32["actor/grad_norm"], rel=1e-3)
    assert trained["perturb/grad_log_sigma_norm"] == pytest.approx(fp32["perturb/grad_log_sigma_norm"], rel=1e-2)
    assert trained["loss/policy"] == pytest.approx(fp32["loss/policy"], rel=1e-3)


def test_fp32_and_bf16_have_no_scaler(group_of_one):
    for precision in ("fp32", "bf16"):
        policy = Policy(group_of_one, f"distributed.mixed_precision={precision}")
        assert policy.scaler is None
        record = policy.step()
        assert "actor/loss_scale" not in record and "actor/fp16_overflow" not in record


# ------------------------------------------------------------------------------------------------ two ranks


def poison_one_shard(original):
    """`reduce_replicated_grads` that then puts an inf into this rank's shard of the first sharded gradient: an
    overflow only this rank can see."""

    def reduce_then_poison(ctx, params):
        original(ctx, params)
        grad = next(p.grad for p in params if isinstance(p.grad, DTensor))
        grad.to_local().view(-1)[0] = float("inf")

    return reduce_then_poison


def rank_main(rank: int, store: str, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        policy = Policy(DistContext(rank=rank, world_size=2, fsdp=True), "distributed.mixed_precision=fp16")
        if rank == 1:
            update_module.reduce_replicated_grads = poison_one_shard(update_module.reduce_replicated_grads)
        start = policy.state()
        record = policy.step(torch.arange(rank * 4, rank * 4 + 4))
        unchanged = all(torch.equal(t, start[k]) for k, t in policy.state().items())
        out[rank] = (record["actor/fp16_overflow"], record["actor/grad_norm_nonfinite"], policy.scaler.get_scale(),
                     unchanged)
    finally:
        dist.destroy_process_group()


def test_an_overflow_one_rank_sees_skips_the_step_on_both(tmp_path):
    """Only rank 1's shard holds the inf: the all-reduced found-inf flag makes rank 0 skip and back off too."""
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_main, args=(str(tmp_path / "store"), out), nprocs=2, join=True)
        ranks = dict(copy.deepcopy(out))
    for rank in (0, 1):
        assert ranks[rank] == (1.0, 1.0, 2.0**15, True), rank  # overflow, skipped, 2^16 halved, nothing stepped
