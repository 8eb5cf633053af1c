"""A verifiers environment (tests/trainer/vf_arithmetic.py: products to answer, reward 1 when the reply contains
the product) played through the policy endpoint on the tiny TIR warm start: verifiers' own rollout path (its env,
its interception server, its scoring) with the endpoint as its client. The endpoint records every episode's tokens,
the reward is what verifiers' reward function gives the recorded reply, and GRPO trains on it for two steps.
"""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from tiny_tir import SMALL

pytest.importorskip("verifiers.v1")

import vf_arithmetic  # noqa: E402 - needs verifiers

from trainer.components import build_components  # noqa: E402
from trainer.loop import collect_step, train  # noqa: E402
from trainer.setup.build import build_config  # noqa: E402

pytestmark = pytest.mark.smoke
HARNESS = ["rollout.source=harness", "env.harness=vf_arithmetic:play"]


def _cfg(tmp_path, sft_dir, *extra):
    return build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", *HARNESS, *extra])


def _verifiers_reward(task, reply: str) -> float:
    """verifiers' reward function of `task` on a reply, as its scoring reads it (`trace.last_reply`: stripped)."""
    return asyncio.run(task.contains_answer(trace=SimpleNamespace(last_reply=reply.strip())))


def test_verifiers_episodes_are_recorded_and_rewarded_by_verifiers(tmp_path, sft_dir):
    cfg = _cfg(tmp_path, sft_dir)
    c = build_components(cfg)
    try:
        played, metrics = collect_step(c, cfg, 1)
    finally:
        c.close()
    tasks = vf_arithmetic.play.player.tasks
    assert len(played) == 16 and metrics["rollout/prefix_breaks"] == 0
    by_group: dict[int, set[int]] = {}
    for t in played:
        assert "harness_error" not in t.info and "infra_failure" not in t.info, t.info
        task = tasks[t.info["verifiers_task"]]
        by_group.setdefault(t.group_id, set()).add(task.data.idx)
        # one call per episode: its prompt is the task's question, every response token was sampled
        assert task.data.prompt in c.tokenizer.decode(t.prompt_ids)
        assert t.response_ids and t.loss_mask == [1] * len(t.response_ids)
        assert len(t.rollout_logprobs) == len(t.response_ids)
        assert all(math.isfinite(lp) and lp <= 0 for lp in t.rollout_logprobs)
        reply = c.tokenizer.decode(t.response_ids, skip_special_tokens=True)
        assert t.reward == _verifiers_reward(task, reply)
    assert all(len(idx) == 1 for idx in by_group.values()), "a GRPO group plays one verifiers task"
    assert len(by_group) == 4


def test_two_grpo_steps_train_on_verifiers_episodes(tmp_path, sft_dir):
    cfg = _cfg(tmp_path, sft_dir, "algorithm=grpo", "steps=2", "save_every=2", "algo.entropy_coef=0.01")
    results = train(cfg, show_progress=False)
    assert [r.step for r in results] == [1, 2]
    for r in results:
        m = r.metrics
        assert m["rollout/prefix_breaks"] == 0 and m["rollout/traces_per_episode"] == 1
        assert m["actor/grad_norm_nonfinite"] == 0 and math.isfinite(m["loss/policy"])
        assert m["rollout/sampled_tokens"] > 0 and m["rollout/infra_excluded"] == 0
    before = load_file(str(sft_dir / "model.safetensors"))
    after = load_file(str(tmp_path / "checkpoints" / "step_2" / "model.safetensors"))
    assert all(not torch.equal(before[k], after[k]) for k in before)
