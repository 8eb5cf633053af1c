"""`distributed.mixed_precision=fp16` through the real trainer (the tiny TIR warm start, HF engine, CPU, FSDP2 on a
gloo process group of one), its config rules and its memory plan.

The loss-scaling mechanics themselves (overflow → skip → halve → train, agreement over ranks) are tested on
`update_policy` in test_fp16_loss_scaling.py; here: the run wires the scaler in, logs it, checkpoints it and
restores it on resume.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from shipped_configs import data_overrides
from tiny_tir import SMALL

from trainer.config.errors import ConfigError
from trainer.loop import train
from trainer.runtime.checkpoint import STATE_FILE
from trainer.runtime.memory_plan import plan_memory
from trainer.setup.build import build_config

ROOT = Path(__file__).resolve().parents[3]
FP16 = ["distributed.mixed_precision=fp16",
        "algo.entropy_coef=0.01"]  # the tiny model's rewards are mostly 0: the entropy bonus makes a gradient
HUGE_SCALE = 2.0**40  # the tiny policy's fp16 gradients overflow at it (they hold up to 2^16)


def _cfg(tmp_path, sft_dir, *extra):
    return build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", *FP16, *extra])


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "model.safetensors"))


def _scaler_state(run_dir: Path, step: int) -> dict:
    state = torch.load(run_dir / "checkpoints" / f"step_{step}" / STATE_FILE, weights_only=False)
    return state["extra"]["grad_scaler"]


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.smoke
def test_fp16_trains_two_steps_and_logs_its_loss_scale(tmp_path, sft_dir):
    results = train(_cfg(tmp_path, sft_dir, "steps=2", "save_every=2", "optim.num_minibatches=2"), show_progress=False)
    for result in results:
        m = result.metrics
        assert math.isfinite(m["loss/policy"]) and math.isfinite(m["actor/grad_norm"]) and m["actor/grad_norm"] > 0
        assert m["actor/loss_scale"] == 65536.0 and m["actor/fp16_overflow"] == 0.0  # torch's default 2^16 holds
        assert m["actor/grad_norm_nonfinite"] == 0.0
    assert all("actor/loss_scale" in r and r["loss/policy"] is not None for r in _records(tmp_path))
    before, after = _weights(sft_dir), _weights(tmp_path / "checkpoints" / "step_2")
    assert sum(not torch.equal(before[k], after[k]) for k in before) > 0.9 * len(before)  # it trained
    assert all(after[k].dtype == torch.float32 for k in after)  # fp32 master weights, fp16 only in compute
    state = _scaler_state(tmp_path, 2)  # 2 steps × 2 mini-batches: 4 clean optimizer steps towards growth
    assert state["scale"] == 65536.0 and state["_growth_tracker"] == 4
    assert state["growth_interval"] == 400  # verl's


@pytest.mark.smoke
def test_an_overflowing_step_is_skipped_and_resume_restores_the_halved_scale(tmp_path, sft_dir):
    extra = [f"distributed.fp16_init_scale={HUGE_SCALE}", "optim.num_minibatches=1", "save_every=1"]
    (first,) = train(_cfg(tmp_path, sft_dir, "steps=1", *extra), show_progress=False)
    m = first.metrics
    assert m["actor/fp16_overflow"] == 1.0 and m["actor/grad_norm_nonfinite"] == 1.0
    assert m["actor/loss_scale"] == HUGE_SCALE and math.isfinite(m["loss/policy"])  # the unscaled loss
    before, after = _weights(sft_dir), _weights(tmp_path / "checkpoints" / "step_1")
    assert all(torch.equal(before[k], after[k]) for k in before)  # the step was skipped
    assert _scaler_state(tmp_path, 1) == {"scale": HUGE_SCALE / 2, "growth_factor": 2.0, "backoff_factor": 0.5,
                                          "growth_interval": 400, "_growth_tracker": 0}
    # resumed with the same config (fp16_init_scale still 2^40): the checkpoint's scale, not the config's
    (second,) = train(_cfg(tmp_path, sft_dir, "steps=2", *extra), resume=True, show_progress=False)
    assert second.step == 2 and second.metrics["actor/loss_scale"] == HUGE_SCALE / 2
    overflowed = second.metrics["actor/fp16_overflow"] == 1.0
    expected = (HUGE_SCALE / 4, 0) if overflowed else (HUGE_SCALE / 2, 1)
    state = _scaler_state(tmp_path, 2)
    assert (state["scale"], state["_growth_tracker"]) == expected


# ------------------------------------------------------------------------------------------- config and plan


def test_an_unknown_precision_is_one_error_naming_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        build_config(None, ["distributed.mixed_precision=fp8"])
    message = str(info.value)
    assert message.count("distributed.mixed_precision='fp8'") == 1 and "valid: fp32, bf16, fp16" in message


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_precision_without_fsdp_is_refused(precision):
    with pytest.raises(ConfigError, match=f"distributed.mixed_precision={precision} needs FSDP"):
        build_config(None, [f"distributed.mixed_precision={precision}", "distributed.fsdp=off"])


@pytest.mark.parametrize("scale", ["0", "-1", "inf", "nan"])
def test_a_loss_scale_that_cannot_train_is_refused(scale):
    with pytest.raises(ConfigError, match=r"distributed.fp16_init_scale=.* allowed: a finite scale > 0"):
        build_config(None, ["distributed.mixed_precision=fp16", f"distributed.fp16_init_scale={scale}"])


def test_fp16_is_planned_like_bf16(tmp_path):
    recipe = ROOT / "configs/tir_qwen2.5_7b.yaml"
    one = {p: plan_memory(build_config(recipe, [*data_overrides(recipe, tmp_path), "distributed.world_size=1",
                                                f"distributed.mixed_precision={p}", "algo.kl_coef=0.001"]))
           for p in ("bf16", "fp16", "fp32")}
    assert one["fp16"].precision == "fp16" and one["fp16"].fsdp  # FSDP on one process, as bf16
    assert one["fp16"].total == one["bf16"].total < one["fp32"].total  # 2-byte compute
    assert any(r.name == "reference model fp16" for r in one["fp16"].rows)
