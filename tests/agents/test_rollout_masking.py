"""Void-turn masking happens in the rollout (agents/rollout.py, `RolloutLimits.mask_void_turns`): an episode that
ended on a void turn (no code, no answer) trains on none of its tokens, as in SimpleTIR; other episodes keep their
masks. An episode whose tool call the sandbox could not run ends there and is masked whatever the setting. Real
parts: the transformers engine, the TIR env with the in-process sandbox, the untrained tiny model
(its turns are gibberish, so its episodes end on a void turn) and the scripted "tool caller" (conftest.py).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
from engine_settings import HF_FP32

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from agents.engines.hf import HFEngine
from agents.formats.tir_agent import TIRAgent
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes

LIMITS = RolloutLimits(48, 200, 32, mask_void_turns=False)


def _play(model, tok, limits, greedy=False, **env_kwargs):
    envs_ = [gym.make("alprl/TIRMath-v0", task_types=["multiply"], max_turns=3, **env_kwargs) for _ in range(4)]
    specs = [EpisodeSpec(seed=g, options={"split": "train", "index": 1500 + g}, group_id=g) for g in range(4)]
    try:
        return run_episodes(HFEngine(model, tok, **HF_FP32), TIRAgent(tok), envs_, specs, limits, seed=7,
                            greedy=greedy)
    finally:
        for env in envs_:
            env.close()


def test_void_episodes_train_on_nothing_when_masked(model_tok):
    model, tok = model_tok
    plain = _play(model, tok, LIMITS)
    masked = _play(model, tok, dataclasses.replace(LIMITS, mask_void_turns=True))
    assert all(t.info["void_turn"] and sum(t.loss_mask) > 0 for t in plain)  # sampled tokens, mask 1 unmasked
    for a, b in zip(plain, masked, strict=True):
        assert a.response_ids == b.response_ids and a.reward == b.reward  # the same episode (same seeds)
        assert b.loss_mask == [0] * len(b.response_ids) and b.rollout_logprobs == [0.0] * len(b.response_ids)
        assert b.info["loss_masked"] and b.info["masked_by"] == "void_turn" and "loss_masked" not in a.info


def test_episodes_that_end_with_an_answer_keep_their_mask(tool_caller):
    model, tok = tool_caller
    plain = _play(model, tok, LIMITS, greedy=True)
    masked = _play(model, tok, dataclasses.replace(LIMITS, mask_void_turns=True), greedy=True)
    assert all(not t.info["void_turn"] and t.info["num_tool_calls"] == 1 for t in masked)
    assert [t.loss_mask for t in masked] == [t.loss_mask for t in plain]
    assert all(sum(t.loss_mask) > 0 and "loss_masked" not in t.info for t in masked)


def test_episodes_that_hit_a_dead_sandbox_end_there_and_train_on_nothing(tool_caller):
    model, tok = tool_caller
    dead = _play(model, tok, LIMITS, greedy=True, sandbox_url="http://127.0.0.1:1", sandbox_retry_s=0.1)
    for t in dead:  # mask_void_turns is off: the outage alone masks them
        assert t.info["sandbox_error"] and t.info["loss_masked"] and t.info["masked_by"] == "sandbox_error"
        assert t.reward == 0.0
        assert t.info["turns"] == 1 and t.info["num_tool_calls"] == 1  # no second turn after the failed call
        assert t.loss_mask == [0] * len(t.response_ids) and sum(t.rollout_logprobs) == 0.0
