"""`env.think_history`: keep (default) leaves earlier `<think>` blocks in the stream as sampled under any template;
strip is accepted only where the chat template renders every later turn of an episode as an extension of the
stream, and refused in one line elsewhere: by config validation for the formats that keep an episode in one
assistant message, at start (`validate_model_shape`, `make_agent`) for a template that drops earlier thinking within
an episode. Played on hermes tool turns with the fixture templates of tests/agents/fixtures/ (thinking_templates.py)
on the real Qwen vocabulary, through the real rollout with a scripted engine (as test_hermes_tool_turn.py)."""

from __future__ import annotations

import pytest
from qwen_vocab import wrap
from test_ended_turns import LIMITS, SPEC, TASK, CountingRunner, ScriptedEngine, ids_of
from thinking_templates import TEMPLATES, model_dir, thinking_tokenizer

from agents.env_families import make_agent
from agents.rollout import run_episodes
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


def test_strip_with_hermes_is_left_to_the_template(thinking, tmp_path):
    """Config validation cannot read a template; `validate_model_shape` reads the start model's."""
    cfg = build_config(None, ["env.style=hermes", "env.think_history=strip"])
    assert cfg.env.think_history == "strip"
    qwen3 = model_dir(thinking["qwen3_style"], tmp_path / "qwen3")
    strip_all = model_dir(thinking["strip_all_thinking"], tmp_path / "strip_all")
    validate_model_shape(build_config(None, [f"model.path={qwen3}", "env.style=hermes", "env.think_history=strip"]))
    validate_model_shape(build_config(None, [f"model.path={strip_all}", "env.style=hermes"]))  # keep: any template
    with pytest.raises(ConfigError, match="the chat template's prompt for assistant turn 2 does not extend the token"):
        validate_model_shape(build_config(None, [f"model.path={strip_all}", "env.style=hermes",
                                                 "env.think_history=strip"]))


def test_alprl_train_refuses_it_in_one_line_before_anything_starts(thinking, tmp_path, capsys):
    strip_all = model_dir(thinking["strip_all_thinking"], tmp_path / "strip_all")
    argv = ["train", "--dry-run", f"model.path={strip_all}", "env.style=hermes", "env.think_history=strip"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("alprl train: error: env.think_history=strip: the chat template's prompt for "
                                   "assistant turn 2")
    assert "use keep" in captured.err


NO_TOOL_ROLE = ("{%- for message in messages -%}"
                "{%- if message.role == 'tool' -%}{{ raise_exception('no tool role') }}{%- endif -%}"
                "{{ '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}"
                "{%- endfor -%}"
                "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
"""ChatML that refuses a `tool` message: hermes keeps the one-message format under it."""


def test_make_agent_refuses_strip_where_the_template_breaks_the_stream(thinking, qwen_backend):
    assert make_agent(STRIP, thinking["qwen3_style"]).tool_turn is not None  # holds
    with pytest.raises(ValueError, match="prompt for assistant turn 2 does not extend the token stream"):
        make_agent(STRIP, thinking["strip_all_thinking"])
    with pytest.raises(ValueError, match="env.style=hermes under this chat template keeps the episode in one"):
        make_agent(STRIP, wrap(qwen_backend, chat_template=NO_TOOL_ROLE))
    for tok in (*thinking.values(), wrap(qwen_backend, chat_template=NO_TOOL_ROLE)):
        make_agent(KEEP, tok)  # keep holds under every template


def play(agent, turns):
    env = TIRMathEnv(style="hermes", max_turns=4, runner=CountingRunner())
    engine = ScriptedEngine(turns)
    try:
        return run_episodes(engine, agent, [env], [SPEC], LIMITS)[0], engine
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
    template renders (strip) is the very stream keep samples from, ids for ids."""
    tok = thinking["qwen3_style"]
    agent = make_agent(STRIP, tok)
    traj, engine = play(agent, thinking_turns(tok))
    rendered = tok.apply_chat_template(conversation(agent), add_generation_prompt=True, tokenize=True,
                                       return_dict=False)
    assert engine.requests[1].prompt_ids == list(rendered)
    assert "I multiply first." in tok.decode(rendered)


def test_the_strip_all_template_would_show_turn_2_a_prompt_the_model_did_not_sample_from(thinking):
    """What strip would need under this template, and why it is refused: its prompt for turn 2 has no thinking where
    the stream the model wrote into has it, so turn 2 would be a new sample with its own prompt."""
    tok = thinking["strip_all_thinking"]
    agent = make_agent(KEEP, tok)
    _, engine = play(agent, thinking_turns(tok))
    rendered = tok.apply_chat_template(conversation(agent), add_generation_prompt=True, tokenize=False)
    assert "I multiply first." not in rendered and "<|im_start|>assistant\nJe calcule.\n<tool_call>" in rendered
    assert "I multiply first." in tok.decode(engine.requests[1].prompt_ids)
