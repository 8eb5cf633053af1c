"""LoRA RL under `torchrun --nproc-per-node 2` on CPU with gloo and FSDP2 (tests/trainer/runtime/test_torchrun_train.py's
setting, `model.lora.r=8` on top): two ranks end with the adapters of one process, the merged weights they push
to their engines gathered from the shards (each rank samples its episodes with them); a sharded LoRA checkpoint
(the adapters and their optimizer state only: `ignore_frozen_params`) resumes to the identical next step.
Tolerance on the adapters, as on full weights there: 2e-6 absolute (float summation order).
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from test_torchrun_train import records, run_train

from trainer.runtime.lora import ADAPTER_WEIGHTS

LORA = ("model.lora.r=8", "optim.lr=1e-3")


def adapters(run_dir, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step}" / ADAPTER_WEIGHTS)


@pytest.fixture(scope="module")
def runs(sft_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_torchrun")
    done = {"one": run_train(root / "one", sft_dir, 2, more=LORA), "two": run_train(root / "two", sft_dir, 2, 2, more=LORA)}
    for name, proc in done.items():
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
    return root


def test_two_ranks_end_with_the_adapters_of_one_process(runs):
    one, two = records(runs / "one"), records(runs / "two")
    assert [r["step"] for r in two] == [1, 2]
    for a, b in zip(one, two, strict=True):
        assert b["rollout/sampled_tokens"] == a["rollout/sampled_tokens"]  # the same episodes: the same weights
        assert b["loss/policy"] == pytest.approx(a["loss/policy"], rel=1e-5, abs=1e-9)
        assert b["actor/grad_norm"] == pytest.approx(a["actor/grad_norm"], rel=1e-5)
    w1, w2 = adapters(runs / "one", 2), adapters(runs / "two", 2)
    assert w1.keys() == w2.keys() and all(".lora_" in k for k in w1)
    assert max(w1[k].abs().max().item() for k in w1 if "lora_B" in k) > 1e-4  # B moved from 0
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=0, atol=2e-6, msg=name)
    assert not (runs / "two" / "checkpoints" / "step_2" / "model.safetensors").exists()


def test_a_sharded_lora_checkpoint_resumes_to_the_identical_next_step(runs, sft_dir):
    resumed = run_train(runs / "two", sft_dir, 3, 2, "--resume", more=LORA)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = run_train(runs / "three", sft_dir, 3, 2, more=LORA)
    assert straight.returncode == 0, straight.stderr[-3000:]
    a, b = records(runs / "two")[-1], records(runs / "three")[-1]
    assert a["step"] == b["step"] == 3 and a["loss/policy"] == b["loss/policy"]
    assert a["actor/grad_norm"] == b["actor/grad_norm"]
    wa, wb = adapters(runs / "two", 3), adapters(runs / "three", 3)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
