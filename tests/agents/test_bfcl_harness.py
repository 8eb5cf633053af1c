"""BFCL through the policy endpoint: the OpenAI-client harness (agents/harnesses/bfcl_harness.py) plays a BFCL entry
against real uvicorn on loopback, and its episode is the native BFCL agent's token for token (Qwen2.5's template:
tools in the system prompt, tool calls as `tool_calls`, results as `tool` messages), with BFCL's checker's reward."""

from __future__ import annotations

from test_bfcl_agent import GroundTruthEngine
from test_policy_endpoint import same_stream, source

from agents.formats.bfcl_agent import BFCLAgent
from agents.harnesses import bfcl_harness
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from envs.bfcl import BFCLEnv
from envs.bfcl.expert import expert_turns

SPEC = EpisodeSpec(0, {"split": "test", "task_id": 0}, 0)


def test_an_openai_client_plays_bfcl_through_the_endpoint_as_the_native_agent_does(qwen_tokenizer):
    tok = qwen_tokenizer
    env = BFCLEnv(categories=["base"], observation="messages")
    env.reset(options=SPEC.options)
    turns = [t for user_turn in expert_turns(env.session.entry, env.session.truth) for t in user_turn]
    agent, limits = BFCLAgent(tok), RolloutLimits(512, 20_000, 8_000, mask_void_turns=False)
    (native,) = run_episodes(GroundTruthEngine(tok, turns), agent, [BFCLEnv(categories=["base"],
                                                                             observation="messages")], [SPEC], limits)
    played = source(GroundTruthEngine(tok, turns), agent, tok, [env], bfcl_harness.play, limits, "hermes")
    (episode,) = played.run([SPEC], 0)
    assert native.reward == 1.0 and episode.reward == 1.0 and episode.info["won"]
    assert len(episode.traces) == 1  # every call extended the episode's tokens
    same_stream(native, episode)
    env.close()
