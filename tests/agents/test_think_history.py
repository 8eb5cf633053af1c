"""`env.think_history`: keep (default) leaves earlier `<think>` blocks in the stream as sampled under any template;
strip shows each later turn the history as the chat template renders it: where that extends the stream the episode
stays one trace, where it does not (a template that drops earlier thinking) the turn starts a new trace whose prompt
is the template's rendering, token for token (agents/templates/history.py). Refused in one line only where there is no earlier
assistant turn: the formats that keep an episode in one assistant message. Played on hermes tool turns with the
fixture templates of tests/agents/fixtures/ (thinking_templates.py) and Qwen2.5's on the real Qwen vocabulary,
through the real rollout with a scripted engine (as test_hermes_tool_turn.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from qwen_vocab import wrap
from test_ended_turns import LIMITS, SPEC, TASK, CountingRunner, ScriptedEngine, ids_of
from thinking_templates import TEMPLATES, model_dir, thinking_tokenizer

from agents.env_families import make_agent
from agents.rollout import run_episodes
from agents.templates.check import EPISODE_TURNS, QUESTION, strip_traces
from agents.templates.history import HistoryPolicy
from app.cli import main
from envs.tir.env import TIRMathEnv
from envs.tir.styles import get_style
from trainer.config.errors import ConfigError
from trainer.config.train_config import EnvConfig
from trainer.setup.build import build_config
from trainer.setup.file_checks import validate_model_shape

HERMES = get_style("hermes")
CODE = "print(8448 * 4126)"
THOUGHT = "<think>\nI multiply first.\n</think>\n\n"
STRIP = EnvConfig(style="hermes", think_history="strip")
KEEP = EnvConfig(style="hermes")


@pytest.fixture(scope="module")
def thinking(qwen_backend):
    return {name: thinking_tokenizer(qwen_backend, name) for name in TEMPLATES}


def test_the_policy_is_a_choice_and_keep_is_the_default():
    assert build_config(None, []).env.think_history == "keep"
    with pytest.raises(ConfigError, match=r"env.think_history='drop' is not a think_history policy; valid: keep, "
                       "strip"):
        build_config(None, ["env.think_history=drop"])


@pytest.mark.parametrize("overrides,what", [
    (["env.style=simpletir"], "alprl/TIRMath-v0 with env.style=simpletir"),
    (["env.style=torl"], "alprl/TIRMath-v0 with env.style=torl"),
    (["env.id=alprl/Math-v0"], "alprl/Math-v0"),
    (["env.id=alprl/Household-v0"], "alprl/Household-v0"),
])
def test_strip_is_refused_by_config_validation_where_an_episode_is_one_assistant_message(overrides, what):
    with pytest.raises(ConfigError) as exc:
        build_config(None, ["env.think_history=strip", *overrides])
    assert str(exc.value).startswith(f"env.think_history=strip: {what} keeps each episode in one assistant message")
    assert "\n" not in str(exc.value)
    build_config(None, overrides)  # keep: accepted


def test_strip_with_hermes_holds_under_every_template_with_tool_turns(thinking, tmp_path):
    """Config validation cannot read a template; `validate_model_shape` reads the start model's: a template that
    drops earlier thinking is accepted now (its turns make traces), one without tool turns is refused."""
    cfg = build_config(None, ["env.style=hermes", "env.think_history=strip"])
    assert cfg.env.think_history == "strip"
    for name in TEMPLATES:
        path = model_dir(thinking[name], tmp_path / name)
        validate_model_shape(build_config(None, [f"model.path={path}", "env.style=hermes", "env.think_history=strip"]))


def test_alprl_train_dry_run_accepts_strip_under_a_template_that_drops_every_turns_thinking(thinking, tmp_path,
                                                                                           capsys):
    strip_all = model_dir(thinking["strip_all_thinking"], tmp_path / "strip_all")
    config = json.loads((strip_all / "config.json").read_text())  # the dimensions the memory plan reads
    config |= {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
               "vocab_size": len(thinking["strip_all_thinking"])}
    (strip_all / "config.json").write_text(json.dumps(config))
    argv = ["train", "--dry-run", f"model.path={strip_all}", "env.style=hermes", "env.think_history=strip"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "env.think_history" not in capsys.readouterr().err


NO_TOOL_ROLE = ("{%- for message in messages -%}"
                "{%- if message.role == 'tool' -%}{{ raise_exception('no tool role') }}{%- endif -%}"
                "{{ '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}"
                "{%- endfor -%}"
                "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
"""ChatML that refuses a `tool` message: hermes keeps the one-message format under it."""


def test_make_agent_refuses_strip_only_where_the_template_has_no_tool_turns(thinking, qwen_backend):
    for tok in thinking.values():
        assert make_agent(STRIP, tok).tool_turn is not None  # holds: chat turns
    with pytest.raises(ValueError, match="env.style=hermes under this chat template keeps the episode in one"):
        make_agent(STRIP, wrap(qwen_backend, chat_template=NO_TOOL_ROLE))
    for tok in (*thinking.values(), wrap(qwen_backend, chat_template=NO_TOOL_ROLE)):
        make_agent(KEEP, tok)  # keep holds under every template


def play(agent, turns, think_history="keep"):
    env = TIRMathEnv(style="hermes", max_turns=4, runner=CountingRunner())
    engine = ScriptedEngine(turns)
    limits = dataclasses.replace(LIMITS, history=HistoryPolicy(think_history=think_history))
    try:
        return run_episodes(engine, agent, [env], [SPEC], limits)[0], engine
    finally:
        env.close()


def thinking_turns(tok):
    call = ids_of(tok, THOUGHT + "Je calcule.\n" + HERMES.format_tool_call(CODE), end="<|im_end|>")
    answer = ids_of(tok, "<think>\nDone.\n</think>\n\nSo \\boxed{34856448}.", end="<|im_end|>")
    return [(call, "eos"), (answer, "eos")]


def conversation(agent):
    """The episode as chat messages up to turn 2, turn 1's thinking in its content (as a re-rendering stores it)."""
    call = {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": CODE}}}
    return agent.messages(TASK.question) + [
        {"role": "assistant", "content": THOUGHT + "Je calcule.", "tool_calls": [call]},
        {"role": "tool", "content": "34856448"}]


@pytest.mark.parametrize("name", TEMPLATES)
def test_keep_samples_turn_2_after_turn_1_thinking_as_sampled_and_trains_on_it(thinking, name):
    tok = thinking[name]
    turns = thinking_turns(tok)
    traj, engine = play(make_agent(KEEP, tok), turns)
    turn_1 = turns[0][0]
    assert traj.reward == 1.0 and traj.response_ids[: len(turn_1)] == turn_1
    assert engine.requests[1].prompt_ids[len(traj.prompt_ids): len(traj.prompt_ids) + len(turn_1)] == turn_1
    assert tok.decode(turn_1).startswith(THOUGHT)
    assert traj.loss_mask[: len(turn_1)] == [1] * len(turn_1)  # the thinking the model wrote is trained on


def test_strip_under_qwen3_is_the_templates_own_rendering_of_the_episode(thinking):
    """Qwen3 keeps thinking after the last user message, and an episode has one: the prompt of turn 2 that the
    template renders (strip) is the very stream keep samples from, ids for ids: one trace."""
    tok = thinking["qwen3_style"]
    agent = make_agent(STRIP, tok)
    traj, engine = play(agent, thinking_turns(tok), "strip")
    assert not traj.earlier and traj.reward == 1.0
    rendered = tok.apply_chat_template(conversation(agent), add_generation_prompt=True, tokenize=True,
                                       return_dict=False)
    assert engine.requests[1].prompt_ids == list(rendered)
    assert "I multiply first." in tok.decode(rendered)


def test_the_strip_all_template_shows_turn_2_a_prompt_the_model_did_not_sample_from(thinking):
    """Why strip needs a new trace under this template: its prompt for turn 2 has no thinking where the stream the
    model wrote into (keep) has it."""
    tok = thinking["strip_all_thinking"]
    agent = make_agent(KEEP, tok)
    _, engine = play(agent, thinking_turns(tok))
    rendered = tok.apply_chat_template(conversation(agent), add_generation_prompt=True, tokenize=False)
    assert "I multiply first." not in rendered and "<|im_start|>assistant\nJe calcule.\n<tool_call>" in rendered
    assert "I multiply first." in tok.decode(engine.requests[1].prompt_ids)


def test_strip_under_the_strip_all_template_starts_a_trace_whose_prompt_is_the_templates_rendering(thinking):
    """QwQ / R1: turn 2's prompt drops turn 1's thinking, so turn 2 is sampled from the template's rendering of the
    conversation (turn 1 as the model wrote it, its result as a tool message), token for token; turn 1's trace ends
    at its last sampled token, and both traces carry the episode's reward."""
    tok = thinking["strip_all_thinking"]
    agent = make_agent(STRIP, tok)
    turns = thinking_turns(tok)
    traj, engine = play(agent, turns, "strip")
    first, second = traj.traces
    assert second is traj and traj.info["trace_starts"] == {"think_strip": 1} and traj.info["turns"] == 2
    assert first.response_ids == turns[0][0] and first.loss_mask == [1] * len(turns[0][0])
    written = tok.decode(turns[0][0], skip_special_tokens=True)  # turn 1's text, its thinking included
    messages = agent.messages(TASK.question) + [{"role": "assistant", "content": written},
                                                {"role": "tool", "content": HERMES.tool_message("34856448")}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert second.prompt_ids == list(rendered) == engine.requests[1].prompt_ids
    assert "I multiply first." not in tok.decode(second.prompt_ids) and "34856448" in tok.decode(second.prompt_ids)
    assert second.response_ids == turns[1][0] and second.loss_mask == [1] * len(turns[1][0])
    assert first.reward == second.reward == 1.0 and first.group_id == second.group_id


def test_strip_under_an_append_only_template_is_one_trace_identical_to_keep(qwen_tokenizer):
    """Qwen2.5 keeps every turn's thinking: turn 2's prompt as its template renders the conversation is the stream
    keep samples from (the same text; the ids stay the ones sampled), so strip makes one trace, keep's tokens."""
    tok = qwen_tokenizer
    agent = make_agent(STRIP, tok)
    turns = thinking_turns(tok)
    kept, _ = play(agent, turns)
    stripped, engine = play(agent, thinking_turns(tok), "strip")
    assert not stripped.earlier
    assert (stripped.prompt_ids, stripped.response_ids, stripped.loss_mask) == \
        (kept.prompt_ids, kept.response_ids, kept.loss_mask)
    messages = agent.messages(TASK.question) + [
        {"role": "assistant", "content": tok.decode(turns[0][0], skip_special_tokens=True)},
        {"role": "tool", "content": HERMES.tool_message("34856448")}]
    rendered = tok.apply_chat_template(messages, tools=agent.tools, add_generation_prompt=True, tokenize=False)
    assert tok.decode(engine.requests[1].prompt_ids) == rendered


@pytest.mark.parametrize("name,traces", [("qwen25", [0, 0, 0, 0]), ("qwen3_style", [0, 0, 0, 1]),
                                         ("strip_all_thinking", [0, 1, 2, 3])])
def test_strip_traces_says_which_turns_start_a_trace(thinking, qwen_tokenizer, name, traces):
    """Qwen2.5 keeps everything; Qwen3 drops thinking once the follow-up question arrives (turn 4, past what an
    episode holds); QwQ/R1 drop it at every later turn."""
    tok = qwen_tokenizer if name == "qwen25" else thinking[name]
    agent = make_agent(KEEP, tok)
    assert strip_traces(tok, "hermes", system=agent.messages(QUESTION)[0]["content"], tools=agent.tools) == traces
    assert EPISODE_TURNS == 3
