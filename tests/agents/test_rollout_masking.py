"""Void-turn masking happens in the rollout (agents/rollout.py, `RolloutLimits.mask_void_turns`): an episode that
ended on a void turn (no code, no answer) trains on none of its tokens, as in SimpleTIR; other episodes keep their
masks. Real parts: the transformers engine, the TIR env with the in-process sandbox, the untrained tiny model
(its turns are gibberish, so its episodes end on a void turn) and the scripted "tool caller" (conftest.py).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from agents.engines.hf import HFEngine
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from agents.tir_agent import TIRAgent

LIMITS = RolloutLimits(48, 200, 32)


def _play(model, tok, limits, greedy=False):
    envs_ = [gym.make("alprl/TIRMath-v0", task_types=["multiply"], max_turns=3) for _ in range(4)]
    specs = [EpisodeSpec(seed=g, options={"split": "train", "index": 1500 + g}, group_id=g) for g in range(4)]
    try:
        return run_episodes(HFEngine(model, tok, dtype="float32"), TIRAgent(tok), envs_, specs, limits, seed=7,
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
        assert b.info["loss_masked"] and "loss_masked" not in a.info


def test_episodes_that_end_with_an_answer_keep_their_mask(tool_caller):
    model, tok = tool_caller
    plain = _play(model, tok, LIMITS, greedy=True)
    masked = _play(model, tok, dataclasses.replace(LIMITS, mask_void_turns=True), greedy=True)
    assert all(not t.info["void_turn"] and t.info["num_tool_calls"] == 1 for t in masked)
    assert [t.loss_mask for t in masked] == [t.loss_mask for t in plain]
    assert all(sum(t.loss_mask) > 0 and "loss_masked" not in t.info for t in masked)
