"""`rollout.source=harness` on the tiny TIR warm start: alprl's TIR loop written with the `openai` client
(agents/harnesses/tir_harness.py) through the policy endpoint gives the native rollout's token streams for the same
sampled tokens, and GRPO trains on them for three steps; a harness that edits its history trains too, each episode
two samples (its prefix break), under every preset.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny_tir import SMALL

from trainer.components import build_components
from trainer.loop import collect_step, train
from trainer.setup.build import build_config

pytestmark = pytest.mark.smoke
HARNESS = ["rollout.source=harness", "env.harness=agents.harnesses.tir_harness:play"]


def _cfg(tmp_path, sft_dir, *extra):
    return build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", *extra])


def test_harness_rollouts_are_the_native_rollouts_token_for_token(tmp_path, sft_dir):
    """Step 1 of both sources on the same weights (fp32 sampler: batches of other shapes give the same tokens)."""
    harness_cfg = _cfg(tmp_path, sft_dir, *HARNESS, "rollout.dtype=float32")
    c = build_components(harness_cfg)
    try:
        played, metrics = collect_step(c, harness_cfg, 1)
        native, _ = collect_step(c, _cfg(tmp_path, sft_dir, "rollout.dtype=float32"), 1)
    finally:
        c.close()
    assert metrics["rollout/prefix_breaks"] == 0 and len(played) == len(native) == 16
    assert any(t.info["num_tool_calls"] > 0 for t in native), "the warm start should call the tool"
    for n, h in zip(native, played, strict=True):
        sampled = [i for i, m in zip(n.response_ids, n.loss_mask, strict=True) if m]
        assert [i for i, m in zip(h.response_ids, h.loss_mask, strict=True) if m] == sampled
        assert (h.prompt_ids, h.response_ids, h.loss_mask, h.turn_spans) == \
            (n.prompt_ids, n.response_ids, n.loss_mask, n.turn_spans)
        assert h.rollout_logprobs == pytest.approx(n.rollout_logprobs, abs=1e-4)
        assert (h.reward, h.group_id, h.info["won"]) == (n.reward, n.group_id, n.info["won"])


def _params(path):
    return load_file(str(path / "model.safetensors"))


def test_three_grpo_steps_train_on_harness_trajectories(tmp_path, sft_dir):
    cfg = _cfg(tmp_path, sft_dir, *HARNESS, "algorithm=grpo", "steps=3", "save_every=3", "algo.entropy_coef=0.01")
    results = train(cfg, show_progress=False)
    assert [r.step for r in results] == [1, 2, 3]
    for r in results:
        m = r.metrics
        assert m["rollout/prefix_breaks"] == 0 and m["rollout/traces_per_episode"] == 1
        assert m["actor/grad_norm_nonfinite"] == 0 and math.isfinite(m["loss/policy"])
        assert m["rollout/sampled_tokens"] > 0 and m["rollout/infra_excluded"] == 0
    before, after = _params(sft_dir), _params(tmp_path / "checkpoints" / "step_3")
    assert all(not torch.equal(before[k], after[k]) for k in before)


PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "algorithms").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_trains_on_an_editing_harness_two_traces_per_episode(tmp_path, sft_dir, preset):
    """Every preset on trajectories of episodes that broke their prefix: DAPO refills and regroups whole episodes,
    GiGPO reads the turns of both traces, MIPU screens the update (its validation batch is the native loop's)."""
    cfg = _cfg(tmp_path, sft_dir, "rollout.source=harness", "env.harness=edit_harness:play", f"algorithm={preset}",
               "steps=1", "save_every=1", "rollout.prompts_per_step=2", "rollout.group_size=4")
    (result,) = train(cfg, show_progress=False)
    m = result.metrics
    assert m["rollout/prefix_breaks"] == 8 and m["rollout/traces_per_episode"] == 2
    assert m["actor/grad_norm_nonfinite"] == 0 and math.isfinite(m["loss/policy"])
