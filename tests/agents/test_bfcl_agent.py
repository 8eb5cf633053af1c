"""The BFCL agent's token stream is the chat template's rendering of the conversation it stands for: prompt with the
episode's tools, each turn as written, each observation (tool results, the next user turn) as the template writes it
after the turn, through the next generation prompt; on Qwen2.5's real template and on the tiny ChatML. And the
rollout plays a BFCL episode through it end to end (the ground-truth script as the engine)."""

from __future__ import annotations

import json

import pytest

from agents.control_tokens import continuation_ids
from agents.env_families import make_env, problem_count
from agents.experts import play_bfcl_expert
from agents.formats.bfcl_agent import BFCLAgent
from envs.bfcl import BFCLEnv
from trainer.setup.build import build_config


def _conversation(agent: BFCLAgent, env: BFCLEnv, entry_id: int):
    """(the agent's ids for the ground-truth episode, the conversation as chat messages, tools= or None)."""
    cfg = build_config(None, ["env.id=alprl/BFCL-v0", "env.task_types=[base]"])
    env.reset(options={"task_id": entry_id})
    ep = play_bfcl_expert(cfg, env, entry_id)  # resets the env itself: the train split wraps around the entries
    messages, tools, rendered = agent.opening(ep.question)
    tools = tools if rendered else None
    ids = agent.prompt_ids(ep.question, {})
    for k, turn in enumerate(ep.turns):
        ids += agent.turn_ids(turn)
        messages.append({"role": "assistant", "content": turn})
        if k < len(ep.observations):
            ids += agent.observation_ids(ep.observations[k])
            messages += json.loads(ep.observations[k])
    return ids, messages, tools, ep


@pytest.mark.parametrize("which", ["qwen", "tiny"])
def test_the_agents_stream_is_the_templates_rendering_of_the_episode(which, request):
    tok = request.getfixturevalue("qwen_tokenizer" if which == "qwen" else "tiny_tokenizer")
    agent = BFCLAgent(tok)
    env = BFCLEnv(categories=["base"], observation="messages")
    ids, messages, tools, ep = _conversation(agent, env, 0)
    assert ep.reward == 1.0
    roles = {m["role"] for obs in ep.observations for m in json.loads(obs)}
    assert roles == {"tool", "user"}  # tool results and a next user turn, each rendered after a turn
    rendered = list(tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False))
    # the stream ends at the last turn's end-of-turn token; the template writes its newline after it
    assert ids == rendered[: len(ids)] and tok.decode(rendered[len(ids):]) == "\n"
    env.close()


def test_a_template_without_tools_gets_them_in_the_system_message(tiny_tokenizer):
    env = BFCLEnv(categories=["base"], observation="messages")
    first, info = env.reset(options={"task_id": 0})
    messages, _, rendered = BFCLAgent(tiny_tokenizer).opening(first)
    if not rendered:  # the tiny ChatML does not render `tools=`
        assert messages[0]["role"] == "system" and '"name": "mkdir"' in messages[0]["content"]
    assert messages[-1] == info["messages"][-1]
    env.close()


def test_tool_results_render_as_the_templates_tool_turn(qwen_tokenizer):
    ids = continuation_ids(qwen_tokenizer, [{"role": "tool", "content": "A"}, {"role": "tool", "content": "B"}])
    text = qwen_tokenizer.decode(ids)
    assert text == ("\n<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n"
                    "</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_the_env_family_sizes_bfcls_test_split_by_its_entries():
    cfg = build_config(None, ["env.id=alprl/BFCL-v0", "env.task_types=[base,miss_func]"])
    assert problem_count(cfg.env, "test") == 400
    env = make_env(cfg.env)
    obs, _ = env.reset(options={"split": "test", "task_id": 399})
    assert json.loads(obs)["messages"][0]["role"] == "user"
    env.close()


class GroundTruthEngine:
    """Samples the ground-truth player's turns of one BFCL entry in order, each closed by the end-of-turn token."""

    concurrent_callers = False
    overlap_episodes = False
    max_model_len = 200_000

    def __init__(self, tok, turns: list[str]):
        self.tok, self.turns, self.calls = tok, turns, 0

    def submit(self, requests, *, greedy=False, seed=None):
        from concurrent.futures import Future

        from agents.engines.base import GenerationResult

        futures = []
        for _ in requests:
            ids = BFCLAgent(self.tok).turn_ids(self.turns[self.calls])
            self.calls += 1
            future: Future = Future()
            future.set_result(GenerationResult(ids, [-0.5] * len(ids), "eos"))
            futures.append(future)
        return futures


def test_the_rollout_plays_a_bfcl_episode_token_in_token_out(qwen_tokenizer):
    from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
    from envs.bfcl.expert import expert_turns

    env = BFCLEnv(categories=["base"], observation="messages")
    env.reset(options={"split": "test", "task_id": 0})
    turns = [t for user_turn in expert_turns(env.session.entry, env.session.truth) for t in user_turn]
    agent = BFCLAgent(qwen_tokenizer)
    (traj,) = run_episodes(GroundTruthEngine(qwen_tokenizer, turns), agent, [env],
                           [EpisodeSpec(0, {"split": "test", "task_id": 0}, 0)],
                           RolloutLimits(512, 20_000, 8_000, mask_void_turns=False))
    assert traj.reward == 1.0 and traj.info["won"] and traj.info["turns"] == len(turns)
    sampled = [t for t, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    assert sampled == [i for turn in turns for i in agent.turn_ids(turn)]  # mask 1 exactly on the sampled ids
    first, _ = BFCLEnv(categories=["base"], observation="messages").reset(options={"split": "test", "task_id": 0})
    assert traj.prompt_ids == agent.prompt_ids(first, {})
    env.close()
