"""`env.context`: an episode whose stream nears the budget goes on in a new trace whose prompt is its compacted history
(agents/templates/history.py), built from ids the episode already has: the opening prompt, a line or a summary shown
as an observation, then the latest rounds as they were sampled and appended.

Hand-checked on the TIR env (simpletir, one assistant message) with a scripted engine on the real Qwen vocabulary;
then with real parts: the transformers engine over the tiny test model (context 1,024) on the WebShop env, whose
pages fill that context within a few turns (tests/agents/test_rollout_context.py: without compaction every episode
ends there), and on the household env.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest
from engine_settings import HF_FP32
from test_ended_turns import SPEC, CountingRunner, ScriptedEngine, ids_of

import envs  # noqa: F401  (registers the alprl/* envs)
from agents.engines.hf import HFEngine
from agents.env_families import make_agent, make_env
from agents.formats.tir_agent import TIRAgent
from agents.formats.webshop_agent import WebShopAgent
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from agents.templates.history import (
    DROPPED_OUTPUT,
    HistoryPolicy,
    dropped_rounds_line,
    rounds_of,
    summary_line,
    target_tokens,
)
from envs.tir.env import TIRMathEnv
from envs.tir.styles import get_style
from trainer.config.train_config import EnvConfig

CALL = get_style("simpletir").format_tool_call("print(1)").rstrip("\n")  # the stop string "\n```\n" ends it
LONG = "print('ab ' * 100)"  # an output longer than the line that replaces it (64 tokens after the cap)


def tir_episode(tok, policy: HistoryPolicy, turns: int = 6, extra: list | None = None, max_new: int = 16,
                code: str = "print(1)"):
    """`turns` tool calls on the TIR env (6 turns allowed), each running `code`, then the engine has nothing more."""
    call = get_style("simpletir").format_tool_call(code).rstrip("\n")  # the stop string "\n```\n" ends it
    script = [(ids_of(tok, f"Step {n}.{call}\n```\n"), "stop") for n in range(turns)]
    engine = ScriptedEngine((extra or []) + script)
    env = TIRMathEnv(style="simpletir", max_turns=turns, runner=CountingRunner())
    limits = RolloutLimits(max_new_tokens=max_new, max_response_tokens=4000, max_obs_tokens=64,
                           mask_void_turns=False, history=policy)
    try:
        return run_episodes(engine, TIRAgent(tok, "simpletir"), [env], [SPEC], limits)[0], engine
    finally:
        env.close()


def test_sliding_keeps_the_latest_rounds_as_sampled_behind_a_line_saying_how_many_went(qwen_tokenizer):
    tok = qwen_tokenizer
    whole, _ = tir_episode(tok, HistoryPolicy())  # the same episode without compaction: one trace
    assert not whole.earlier and whole.info["turns"] == 6
    opening, stream_rounds = whole.prompt_ids, rounds_of(whole)
    per_round = {len(t) + len(o) for t, o in stream_rounds[:-1]}
    assert len(per_round) == 1  # every round (turn + its output) has the same length here
    budget = len(opening) + 3 * per_round.pop() + 16  # room for three rounds and a turn
    traj, engine = tir_episode(tok, HistoryPolicy(context="sliding", context_budget=budget))
    assert traj.info["turns"] == 6 and len(traj.traces) > 1
    assert traj.info["trace_starts"] == {"compaction": len(traj.traces) - 1}
    agent = TIRAgent(tok, "simpletir")
    seen = 0  # rounds of the stream before each trace
    for k, trace in enumerate(traj.traces):
        assert len(trace.prompt_ids) + len(trace.response_ids) <= budget  # the context never held more
        if k:
            assert trace.info["trace_start"] == "compaction"
            prompt = trace.prompt_ids
            assert prompt[: len(opening)] == opening
            kept = [i for t, o in stream_rounds[seen - 1: seen] for part in (t, o) for i in part]
            dropped = next(n for n in range(1, seen + 1)
                           if prompt[len(opening): len(opening) + len(agent.observation_ids(dropped_rounds_line(n)))]
                           == agent.observation_ids(dropped_rounds_line(n)))
            rest = [i for t, o in stream_rounds[dropped:seen] for part in (t, o) for i in part]
            assert prompt == opening + agent.observation_ids(dropped_rounds_line(dropped)) + rest
            # at most half the budget, but for the last round, which always stays
            assert len(prompt) <= target_tokens(budget, 16) or rest == kept
            assert prompt[-len(kept):] == kept  # the last round, its output included, as it was
        # the engine sampled each turn from the trace's prompt and the trace's own tokens so far
        seen += len(trace.turn_spans)
    assert [r.prompt_ids[: len(opening)] for r in engine.requests] == [opening] * len(engine.requests)
    assert [t for t, _ in rounds_of(traj)] == [t for t, _ in stream_rounds]  # the same turns, all trained on
    assert all(sum(tr.loss_mask) == sum(end - start for start, end in tr.turn_spans) for tr in traj.traces)
    assert traj.info["compacted_tokens"] > 0


def test_drop_tool_outputs_replaces_the_oldest_outputs_first(qwen_tokenizer):
    """The compacted prompt is the opening prompt, maybe the dropped-rounds line, then the latest rounds with their
    turns as sampled and the oldest of their outputs (never the last) replaced by the short line."""
    tok = qwen_tokenizer
    whole, _ = tir_episode(tok, HistoryPolicy(), code=LONG)
    opening, stream_rounds = whole.prompt_ids, rounds_of(whole)
    agent = TIRAgent(tok, "simpletir")
    dropped_line = agent.observation_ids(DROPPED_OUTPUT)
    turn, obs = stream_rounds[0]
    assert len(obs) > 3 * len(dropped_line)
    budget = len(opening) + 4 * (len(turn) + len(obs)) + 16  # the fifth output passes it
    traj, _ = tir_episode(tok, HistoryPolicy(context="drop_tool_outputs", context_budget=budget), code=LONG)
    seen = len(traj.traces[0].turn_spans)
    prompt = traj.traces[1].prompt_ids
    found = []
    for dropped in range(seen):
        head = opening + (agent.observation_ids(dropped_rounds_line(dropped)) if dropped else [])
        kept = stream_rounds[dropped:seen]
        for lines in range(len(kept)):
            rounds = [(t, dropped_line if n < lines else o) for n, (t, o) in enumerate(kept)]
            if head + [i for t, o in rounds for part in (t, o) for i in part] == prompt:
                found.append((dropped, lines))
    assert len(found) == 1, found
    dropped, lines = found[0]
    assert lines >= 1  # outputs went first
    assert len(prompt) <= target_tokens(budget, 16)


def summarize_in_capitals(text: str) -> str:
    return f"DID {text.count('print(1)')} STEPS"


def test_summarize_shows_the_summarizers_text_where_the_dropped_rounds_were(qwen_tokenizer, monkeypatch):
    tok = qwen_tokenizer
    whole, _ = tir_episode(tok, HistoryPolicy())
    per_round = len(rounds_of(whole)[0][0]) + len(rounds_of(whole)[0][1])
    budget = len(whole.prompt_ids) + 3 * per_round + 16
    monkeypatch.setitem(sys.modules, "compaction_summaries", sys.modules[__name__])
    traj, _ = tir_episode(tok, HistoryPolicy(context="summarize", context_budget=budget,
                                             summarizer="compaction_summaries:summarize_in_capitals"))
    agent = TIRAgent(tok, "simpletir")
    second = traj.traces[1]
    opening = whole.prompt_ids
    shown = second.prompt_ids[len(opening):]
    n = next(n for n in range(1, 6) if shown[: len(agent.observation_ids(summary_line(f"DID {n} STEPS")))]
             == agent.observation_ids(summary_line(f"DID {n} STEPS")))
    assert n >= 1 and "DID" in tok.decode(second.prompt_ids)


def test_summarize_by_the_policy_asks_the_engine_for_the_summary(qwen_tokenizer):
    """Without env.summarizer the policy writes it: one greedy request of its own (the engine's next scripted
    answer), whose text is then shown."""
    tok = qwen_tokenizer
    whole, _ = tir_episode(tok, HistoryPolicy())
    per_round = len(rounds_of(whole)[0][0]) + len(rounds_of(whole)[0][1])
    budget = len(whole.prompt_ids) + 3 * per_round + 16
    summary = ids_of(tok, "It printed one.", end="<|im_end|>")
    policy = HistoryPolicy(context="summarize", context_budget=budget)
    # the summary request comes after the turn whose output passes the budget: insert its answer there
    probe, _ = tir_episode(tok, HistoryPolicy(context="sliding", context_budget=budget))  # where it compacts
    first_trace_turns = len(probe.traces[0].turn_spans)
    script = [(ids_of(tok, f"Step {n}.{CALL}\n```\n"), "stop") for n in range(6)]
    script.insert(first_trace_turns, (summary, "eos"))
    eng = ScriptedEngine(script)
    env = TIRMathEnv(style="simpletir", max_turns=6, runner=CountingRunner())
    limits = RolloutLimits(max_new_tokens=16, max_response_tokens=400, max_obs_tokens=64, mask_void_turns=False,
                           history=policy)
    traj = run_episodes(eng, TIRAgent(tok, "simpletir"), [env], [SPEC], limits)[0]
    env.close()
    request = eng.requests[first_trace_turns]
    assert "Summarize the steps below" in tok.decode(request.prompt_ids) and request.max_new_tokens <= 64
    assert "Summary of the earlier steps: It printed one." in tok.decode(traj.traces[1].prompt_ids)
    assert traj.info["turns"] == 6  # the summary request is no turn of the episode


def test_compaction_is_refused_for_chat_turns_and_single_turn_envs(qwen_tokenizer):
    with pytest.raises(ValueError, match="makes each tool call an assistant turn of its own"):
        make_agent(EnvConfig(style="hermes", context="sliding"), qwen_tokenizer)
    make_agent(EnvConfig(style="simpletir", context="sliding"), qwen_tokenizer)


# ------------------------------------------------------------- real engine, real envs


@pytest.mark.parametrize("policy", ["sliding", "drop_tool_outputs"])
def test_webshop_episodes_go_on_past_the_context_in_compacted_traces(model_tok, policy):
    """The WebShop pages fill the tiny model's 1,024-token context within a few turns (without compaction each episode
    ends there); compacted at a 1,024 budget, the episodes run to their step limit, each trace within the context."""
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    limits = RolloutLimits(max_new_tokens=8, max_response_tokens=4000, max_obs_tokens=400, mask_void_turns=False,
                           history=HistoryPolicy(context=policy, context_budget=1024))
    envs_ = [gym.make("alprl/WebShop-v0", num_products=300, max_steps=12) for _ in range(2)]
    specs = [EpisodeSpec(seed=i, options={"split": "train", "index": 1500 + i}, group_id=0) for i in range(2)]
    trajs = run_episodes(engine, WebShopAgent(tok), envs_, specs, limits, seed=2)
    for env in envs_:
        env.close()
    for traj in trajs:
        assert not traj.info.get("context_exhausted"), traj.info
        assert len(traj.traces) > 1 and traj.info["trace_starts"]["compaction"] == len(traj.traces) - 1
        opening = traj.traces[0].prompt_ids
        for trace in traj.traces:
            assert len(trace.prompt_ids) + len(trace.response_ids) <= 1024
            assert trace.prompt_ids[: len(opening)] == opening
            assert len(trace.loss_mask) == len(trace.response_ids) == len(trace.rollout_logprobs)
        assert sum(len(tr.turn_spans) for tr in traj.traces) == traj.info["turns"]


def test_household_episodes_compact_below_the_context(model_tok):
    """The household's opening prompt (room, task, rules) is ~560 tokens of the 1,024: at a 1,000 budget each
    compaction brings the prompt back under it, and every trace stays within the context."""
    model, tok = model_tok
    engine = HFEngine(model, tok, **HF_FP32)
    env_cfg = EnvConfig(id="alprl/Household-v0", context="sliding", context_budget=1000)
    agent = make_agent(env_cfg, tok)
    limits = RolloutLimits(max_new_tokens=12, max_response_tokens=4000, max_obs_tokens=200, mask_void_turns=False,
                           history=HistoryPolicy(context="sliding", context_budget=1000))
    envs_ = [make_env(env_cfg) for _ in range(2)]
    specs = [EpisodeSpec(seed=i, options={"split": "train", "index": 1500 + i}, group_id=0) for i in range(2)]
    trajs = run_episodes(engine, agent, envs_, specs, limits, seed=3)
    for env in envs_:
        env.close()
    assert any(len(t.traces) > 1 for t in trajs)
    for traj in trajs:
        assert not traj.info.get("context_exhausted"), traj.info
        for k, trace in enumerate(traj.traces):
            assert len(trace.prompt_ids) + len(trace.response_ids) <= 1024
            if k:
                assert len(trace.prompt_ids) + 12 <= 1000
                assert trace.prompt_ids[: len(traj.traces[0].prompt_ids)] == traj.traces[0].prompt_ids
