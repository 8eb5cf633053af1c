"""The weight-sync check on the real vLLM-CPU engine: a clean push passes in fp32 and bf16 (the matmul weights read
back through vLLM's packed GEMMs, fused q/k/v and gate/up split back by name); one tensor corrupted in transport is
refused, named; so is a tied LM head whose packed GEMM was left on the old weights."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from tool_script import needs_vllm

import agents.engines.vllm as vllm_engine
from agents.engines.vllm_sync import pack_chunks
from agents.engines.weight_check import WeightSyncError

pytestmark = [pytest.mark.slow, needs_vllm]


def _moved(model):
    new = copy.deepcopy(model)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.1)
    return new


@pytest.fixture(params=["vllm_fp32", "vllm_bf16"])
def checking_engine(request):
    engine = request.getfixturevalue(request.param)
    engine.verify_sync = True
    yield engine
    engine.verify_sync = False


def test_clean_push_passes_and_reads_every_tensor(checking_engine, model_tok):
    model, _ = model_tok
    checking_engine.update_weights(_moved(model).named_parameters())
    held = checking_engine.llm.collective_rpc("alprl_checksums")[0]
    names = [n for n, _ in model.named_parameters()]
    assert set(names) <= set(held)
    assert "gemm" in [how for how, _ in held["model.layers.0.self_attn.k_proj.weight"]]  # read through the kernel


@pytest.mark.parametrize("target", ["model.layers.1.self_attn.k_proj.weight", "model.layers.0.mlp.down_proj.weight"])
def test_corrupted_push_is_refused_naming_the_tensor(checking_engine, model_tok, monkeypatch, target):
    from safetensors.torch import load, save

    def corrupting_pack(named, dtype, chunk_bytes, sums=None):  # checksummed as pushed, then changed in transit
        for blob in pack_chunks(named, dtype, chunk_bytes, sums):
            tensors = load(blob)
            if target in tensors:
                tensors[target] = tensors[target].clone()
                tensors[target].view(-1)[3] += 0.25
            yield save(tensors)

    model, _ = model_tok
    monkeypatch.setattr(vllm_engine, "pack_chunks", corrupting_pack)
    with pytest.raises(WeightSyncError, match=rf"first differing tensor {target} "):
        checking_engine.update_weights(_moved(model).named_parameters())
    monkeypatch.undo()
    checking_engine.update_weights(_moved(model).named_parameters())  # a clean push puts it right


def _skip_lm_head_repack(worker) -> None:
    """Runs in the vLLM worker: every later sync leaves the packed GEMMs as the reload left them, the state
    `_repack_cpu_gemms` (agents/engines/vllm_sync.py) mends, in which the tied LM head keeps the old weights."""
    import agents.engines.vllm_sync as sync

    sync._repack_cpu_gemms = lambda model: None


def test_a_stale_packed_lm_head_is_refused(tiny_model_dir, model_tok, monkeypatch):
    """The bug the read-back through the GEMM is for: the embedding rows are new, the LM head's packed copy is not."""
    import cloudpickle
    from engine_settings import vllm_engine_kwargs

    from agents.engines.vllm import VLLMEngine

    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # a test's callable into the worker, tests only
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the worker cannot import this test module
    engine = VLLMEngine(tiny_model_dir, **vllm_engine_kwargs(dtype="float32"), kv_cache_memory_bytes=64 << 20,
                        verify_sync=True)
    try:
        model, _ = model_tok
        engine.update_weights(_moved(model).named_parameters())  # repacked: held as pushed
        engine.llm.collective_rpc(_skip_lm_head_repack)
        with pytest.raises(WeightSyncError, match=r"first differing tensor model\.embed_tokens\.weight \(gemm\)"):
            engine.update_weights(model.named_parameters())
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        engine.close()
