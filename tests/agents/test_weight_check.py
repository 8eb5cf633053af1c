"""The weight-sync check: checksums agree across layouts, fused layers split back by name, and a corrupted push is
refused naming its tensor (transformers engine here; vLLM in test_weight_check_vllm.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from engine_settings import hf_engine_kwargs
from torch import nn

from agents.engines.hf import HFEngine
from agents.engines.vllm_readback import engine_readings
from agents.engines.weight_check import WeightSyncError, add, agrees, checksum, first_mismatch

CORRUPTED = "model.layers.1.mlp.down_proj.weight"


def test_checksum_is_additive_and_layout_free():
    t = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    assert agrees(checksum(t), add(checksum(t[:2]), checksum(t[2:])))
    assert agrees(checksum(t), checksum(t.T.contiguous()))
    bad = t.clone()
    bad[3, 1] += 1e-3
    assert not agrees(checksum(t), checksum(bad))
    assert not agrees(checksum(t), checksum(t[:5]))  # a lost row: the element counts differ


def test_first_mismatch_names_the_first_in_push_order_and_missing_names():
    a, b = torch.ones(3), torch.arange(3.0)
    pushed = {"x": checksum(a), "y": checksum(b), "z": checksum(b)}
    held = {"x": [("param", checksum(a))], "y": [("param", checksum(b)), ("gemm", checksum(a))],
            "z": [("param", checksum(a))]}
    assert first_mismatch(pushed, held).startswith("y (gemm)")
    assert first_mismatch({"w": checksum(a)}, {}).startswith("w: the engine holds no tensor")
    assert first_mismatch(pushed, {k: [("param", v)] for k, v in pushed.items()}) is None


class _Fused(nn.Module):
    """A vLLM-like fused projection: weight (N, K) = cat(q, k, v) rows, and a GEMM that multiplies by it."""

    def __init__(self, parts: list[torch.Tensor], empty_weight: bool):
        super().__init__()
        full = torch.cat(parts)
        self.output_sizes = [p.shape[0] for p in parts]
        self.input_size_per_partition, self.output_size_per_partition = full.shape[1], full.shape[0]
        self.weight = nn.Parameter(full[:0] if empty_weight else full, requires_grad=False)  # vLLM-CPU empties it
        self.cpu_linear = lambda x, weight, bias: F.linear(x, full, bias)  # the packed handle keeps the values


def test_readback_splits_fused_layers_and_reads_the_gemm():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(n, 8, generator=gen) for n in (8, 4, 4))
    model = nn.Module()
    model.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    model.layers = nn.ModuleList([nn.Module()])
    model.layers[0].qkv_proj = _Fused([q, k, v], empty_weight=True)
    model.layers[0].norm = nn.Module()
    model.layers[0].norm.weight = nn.Parameter(torch.ones(8))
    readings = engine_readings(model)
    for name, t in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
        got = readings[f"layers.0.{name}.weight"]
        assert [how for how, _ in got] == ["gemm"]  # the emptied parameter is not a reading
        assert agrees(checksum(t), got[0][1])
    assert agrees(checksum(torch.ones(8)), readings["layers.0.norm.weight"][0][1])


def _moved(model: nn.Module) -> nn.Module:
    new = copy.deepcopy(model)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.1)
    return new


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_hf_engine_checks_a_clean_push(model_tok, dtype):
    model, tok = model_tok
    engine = HFEngine(model, tok, **hf_engine_kwargs(dtype=dtype), verify_sync=True)
    engine.update_weights(_moved(model).named_parameters())  # the cast to bf16 is part of the push: no refusal


def test_hf_engine_refuses_a_corrupted_push_naming_the_tensor(model_tok, monkeypatch):
    model, tok = model_tok
    engine = HFEngine(model, tok, **hf_engine_kwargs(), verify_sync=True)
    target = engine.model.get_parameter(CORRUPTED)
    load = HFEngine._load

    def corrupting_load(param, tensor):  # the copy into one tensor goes wrong
        load(param, tensor)
        if param is target:
            param.view(-1)[0] += 0.5

    monkeypatch.setattr(HFEngine, "_load", staticmethod(corrupting_load))
    with pytest.raises(WeightSyncError, match=rf"first differing tensor {CORRUPTED} \(param\)"):
        engine.update_weights(_moved(model).named_parameters())
