"""bench/lora_cost.py with tiny counts on the tiny TIR warm start: full fine-tuning and LoRA r=8 on one saved batch,
one repetition. Checks the summary's shape and that each setting's stages ran; no timing is asserted (a shared
machine's timings say nothing about correctness)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from tiny_tir import SMALL

pytestmark = pytest.mark.smoke

BENCH = Path(__file__).resolve().parents[3] / "bench" / "lora_cost.py"


def test_bench_times_each_setting_on_one_batch(sft_dir, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("lora_cost_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "cost.json"
    assert bench.main(["--config", "", "--settings", "full,r8", "--reps", "1", "--out", str(out),
                       *SMALL, f"sft.output_dir={sft_dir}"]) == 0
    summary = json.loads(out.read_text())
    assert summary["episodes"] == 16 and summary["sampled_tokens"] > 0
    assert set(summary["median_s"]) == set(summary["peak_rss_gib"]) == {"full", "r8"}
    assert all(v > 0 for d in summary["median_s"].values() for v in d.values())
    assert all(0 < g < 64 for g in summary["peak_rss_gib"].values())
    with pytest.raises(SystemExit, match="expected full or r<rank>"):
        bench.setting_overrides("lora", 1e-3)
