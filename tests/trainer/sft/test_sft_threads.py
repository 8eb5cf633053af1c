"""`sft.torch_threads`: SFT trains on its own thread count and hands the run's back; the count is not part of the SFT
cache key (a warm start built on one thread count is reused on another). Real tiny SFT (tiny_tir.SMALL)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_tir import SMALL

from trainer.config.errors import ConfigError
from trainer.setup.build import build_config
from trainer.sft.train import run_sft

pytestmark = pytest.mark.smoke


def test_sft_trains_on_its_threads_and_restores_the_runs(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = run_sft(build_config(None, SMALL + [f"sft.output_dir={tmp_path}", "sft.torch_threads=2"]),
                      show_progress=False)
        assert torch.get_num_threads() == 1  # RL after SFT keeps the run's count
    finally:
        torch.set_num_threads(before)
    assert json.loads((out / "sft_meta.json").read_text())["torch_threads"] == 2


def test_the_thread_count_does_not_invalidate_a_warm_start(sft_dir):
    built = (sft_dir / "model.safetensors").stat().st_mtime_ns
    again = run_sft(build_config(None, SMALL + [f"sft.output_dir={sft_dir}", "sft.torch_threads=2"]),
                    show_progress=False)
    assert again == sft_dir and (sft_dir / "model.safetensors").stat().st_mtime_ns == built  # reused, not rebuilt


def test_a_negative_count_is_refused_before_anything_starts():
    with pytest.raises(ConfigError, match="sft.torch_threads"):
        build_config(None, SMALL + ["sft.torch_threads=-1"])
