"""A thinking warm start: the tiny tokenizer's drop-thinking ChatML (`model.chat_template=chatml_drop_thinking`, as
QwQ / DeepSeek-R1 drop earlier thinking), the TIR expert writing `<think>` blocks (`sft.expert_thinking`), and SFT
sequences made per trace under `env.think_history=strip`, as the rollout makes them (agents/templates/history.py):
each later turn is sampled from the template's rendering, so the warm start learns from those prompts. The SFT key
leaves the new settings out at their defaults, so warm starts built before keep their fingerprint."""

from __future__ import annotations

import pytest

from agents.env_families import make_agent
from agents.experts import ExpertEpisode
from agents.templates.history import HistoryPolicy
from agents.tokenizer import train_tokenizer
from envs.tir.expert import THOUGHTS, expert_turns, with_thinking
from envs.tir.styles import get_style
from envs.tir.tasks import generate_task
from trainer.config.errors import ConfigError
from trainer.config.train_config import EnvConfig
from trainer.setup.build import build_config
from trainer.sft.cache import sft_inputs
from trainer.sft.train import episode_sequences, episode_tokens, play_expert

STRIP = ["env.style=hermes", "env.think_history=strip", "model.chat_template=chatml_drop_thinking",
         "sft.expert_thinking=true", "env.task_types=[multiply]", "sft.p_skip_tool=0", "sft.p_wrong_copy=0"]


@pytest.fixture(scope="module")
def drop_thinking(tiny_tokenizer):
    return train_tokenizer(["x"], vocab_size=300, chat_template="chatml_drop_thinking")


def test_the_drop_thinking_template_keeps_only_the_last_turns_thinking(drop_thinking):
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nA\n</think>\n\nB"},
                {"role": "tool", "content": "1"}, {"role": "assistant", "content": "<think>\nC\n</think>\n\nD"}]
    text = drop_thinking.apply_chat_template(messages, tokenize=False)
    assert "<|im_start|>assistant\nB<|im_end|>" in text and "A" not in text
    assert text.endswith("<|im_start|>assistant\n<think>\nC\n</think>\n\nD<|im_end|>\n")
    with pytest.raises(ValueError, match="chat_template='qwq'; valid: chatml, chatml_drop_thinking"):
        train_tokenizer(["x"], vocab_size=300, chat_template="qwq")
    with pytest.raises(ConfigError, match="model.chat_template='qwq' is not a tiny model chat template"):
        build_config(None, ["model.chat_template=qwq"])


def test_the_thinking_expert_opens_every_turn_with_a_think_block():
    task = generate_task("train", 1503, task_types=["multiply"])
    turns = with_thinking(expert_turns(task, "hermes", p_skip_tool=0.0, p_wrong_copy=0.0, varied_phrasing=False))
    assert [t.split("</think>")[0] for t in turns] == [f"<think>\n{THOUGHTS[0]}\n", f"<think>\n{THOUGHTS[1]}\n"]
    parsed = [get_style("hermes").parse_turn(t) for t in turns]
    assert parsed[0].code == task.solution_code and parsed[1].answered  # the env reads the turns as without


def test_under_strip_each_later_turn_is_a_sequence_from_the_templates_rendering(drop_thinking):
    cfg = build_config(None, STRIP)
    ep = play_expert(cfg, 0)
    assert ep.reward == 1.0 and len(ep.turns) == 2 and ep.turns[0].startswith("<think>")
    agent = make_agent(cfg.env, drop_thinking)
    eos = drop_thinking.convert_tokens_to_ids("<|im_end|>")
    (first_ids, first_mask), (second_ids, second_mask) = episode_sequences(
        agent, ep, eos, cfg.rollout.max_obs_tokens, HistoryPolicy(think_history="strip"))
    messages = agent.messages(ep.question) + [
        {"role": "assistant", "content": ep.turns[0]},
        {"role": "tool", "content": agent.shown_tool_content(ep.observations[0], cfg.rollout.max_obs_tokens)}]
    prompt = drop_thinking.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert second_ids[: len(prompt)] == list(prompt) and second_mask[: len(prompt)] == [0] * len(prompt)
    assert THOUGHTS[0] not in drop_thinking.decode(prompt)  # turn 1's thinking is gone from turn 2's prompt
    assert drop_thinking.decode(second_ids[len(prompt):]) == ep.turns[1] + "<|im_end|>"
    assert second_mask[len(prompt):] == [1] * (len(second_ids) - len(prompt))
    assert drop_thinking.decode(first_ids).endswith(ep.turns[0] + "<|im_end|>")  # the call's turn, then nothing
    assert first_mask[-1] == 1
    # keep (or a template that drops nothing): the one stream of episode_tokens
    assert episode_sequences(agent, ep, eos, cfg.rollout.max_obs_tokens, HistoryPolicy()) == \
        [episode_tokens(agent, ep, eos, cfg.rollout.max_obs_tokens)]


def test_a_lone_guess_is_one_sequence(drop_thinking):
    agent = make_agent(EnvConfig(style="hermes", think_history="strip"), drop_thinking)
    ep = ExpertEpisode("Compute 3 * 4.", with_thinking(["The answer is \\boxed{11}."]), [], 0.0)
    (ids, mask), = episode_sequences(agent, ep, 1, 64, HistoryPolicy(think_history="strip"))
    assert mask[-1] == 1 and ids[-1] == 1


def test_the_new_keys_enter_the_warm_start_key_only_when_set():
    plain = sft_inputs(build_config(None, []))
    assert "chat_template" not in plain["model"] and "expert_thinking" not in plain["sft"]
    assert not {"think_history", "context", "context_budget", "summarizer"} & set(plain["env"])
    thinking = sft_inputs(build_config(None, STRIP))
    assert thinking["model"]["chat_template"] == "chatml_drop_thinking" and thinking["sft"]["expert_thinking"]
    assert thinking["env"]["think_history"] == "strip"
    compacted = sft_inputs(build_config(None, ["env.context=sliding"]))
    assert compacted == plain  # compaction is RL's: the same warm start serves it
