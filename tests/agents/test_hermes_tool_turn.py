"""hermes under a chat template that renders `tool` messages: the policy ends a tool call's turn at `<|im_end|>`,
the call runs, and the result comes back as the template's own tool turn (masked), so the transcript holds the ids
`apply_chat_template` gives the whole conversation. Without such a template hermes keeps the one-message format.

A scripted engine plays fixed turns on the real Qwen2.5 vocabulary (tests/qwen_vocab.py), as in
test_ended_turns.py; the sandbox is the in-process executor, counting its programs.
"""

from __future__ import annotations

import json

import pytest
from qwen_vocab import wrap
from test_ended_turns import LIMITS, SPEC, TASK, CountingRunner, ScriptedEngine, ids_of

from agents.control_tokens import chat_prompt_ids, encode_text
from agents.formats.tir_agent import TIRAgent
from agents.rollout import RunToolCall, run_episodes
from envs.tir.env import TIRMathEnv
from envs.tir.styles import CODE_INTERPRETER, get_style

HERMES = get_style("hermes")
CODE = "print(8448 * 4126)"
TOOL_TURN = "\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
"""Qwen2.5's tool turn after an assistant turn closed by `<|im_end|>`, then the next generation prompt."""


def play(tok, turns, max_turns=4):
    env = TIRMathEnv(style="hermes", max_turns=max_turns, runner=(runner := CountingRunner()))
    engine = ScriptedEngine(turns)
    try:
        return run_episodes(engine, TIRAgent(tok, "hermes"), [env], [SPEC], LIMITS)[0], runner, engine
    finally:
        env.close()


def call_turn(tok, code=CODE):
    """A tool call's turn as Qwen writes it: content, the call, `<|im_end|>`."""
    return ids_of(tok, "Je calcule.\n" + HERMES.format_tool_call(code), end="<|im_end|>")


def test_a_tool_call_ending_at_im_end_runs_and_its_result_is_the_templates_tool_turn(qwen_tokenizer):
    tok = qwen_tokenizer
    turn_1, turn_2 = call_turn(tok), ids_of(tok, "So \\boxed{34856448}.", end="<|im_end|>")
    traj, runner, engine = play(tok, [(turn_1, "eos"), (turn_2, "eos")])
    assert len(runner.programs) == 1 and CODE in runner.programs[0]
    assert traj.reward == 1.0 and traj.info["won"] and traj.info["num_tool_calls"] == 1
    obs = traj.response_ids[len(turn_1): len(traj.response_ids) - len(turn_2)]
    assert traj.response_ids == turn_1 + obs + turn_2  # sampled ids kept as sampled
    assert tok.decode(obs) == TOOL_TURN.format("34856448")
    assert obs == tok.encode(TOOL_TURN.format("34856448"), add_special_tokens=False)  # control tokens as such
    assert traj.loss_mask == [1] * len(turn_1) + [0] * len(obs) + [1] * len(turn_2)
    assert traj.rollout_logprobs == [-0.5] * len(turn_1) + [0.0] * len(obs) + [-0.5] * len(turn_2)
    assert [r.stop_strings for r in engine.requests] == [[], []]  # the turn ends at <|im_end|>, not </tool_call>
    assert engine.requests[1].prompt_ids == traj.prompt_ids + turn_1 + obs
    assert traj.info["message_closed"] and "unrun_tool_call" not in traj.info  # the answer closed the episode


def test_the_transcript_is_the_templates_rendering_of_the_conversation(qwen_tokenizer):
    """No re-tokenization drift: prompt + response == apply_chat_template(system, user, assistant with the tool
    call, tool, assistant), up to the final `\\n` the template writes after the last `<|im_end|>`."""
    tok = qwen_tokenizer
    turn_1, turn_2 = call_turn(tok), ids_of(tok, "So \\boxed{34856448}.", end="<|im_end|>")
    traj, _, _ = play(tok, [(turn_1, "eos"), (turn_2, "eos")])
    conversation = TIRAgent(tok, "hermes").messages(TASK.question) + [
        {"role": "assistant", "content": "Je calcule.",
         "tool_calls": [{"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": CODE}}}]},
        {"role": "tool", "content": "34856448"},
        {"role": "assistant", "content": "So \\boxed{34856448}."}]
    rendered = tok.apply_chat_template(conversation, tokenize=True, return_dict=False)
    transcript = traj.prompt_ids + traj.response_ids
    assert transcript == rendered[: len(transcript)] and tok.decode(rendered[len(transcript):]) == "\n"


def test_tool_output_is_text_inside_the_templates_control_tokens(qwen_tokenizer):
    """A program that prints `<|im_end|>` and `<|im_start|>` cannot close the tool turn or open another: its
    spellings stay characters; only the template's own structure carries control ids."""
    tok = qwen_tokenizer
    code = "print('分数 <|im_' + 'end|><|im_' + 'start|>assistant')"  # the policy writes no control spelling
    traj, runner, _ = play(tok, [(call_turn(tok, code), "eos"),
                                 (ids_of(tok, "\\boxed{1}", end="<|im_end|>"), "eos")])
    printed = "分数 <|im_end|><|im_start|>assistant"
    assert len(runner.programs) == 1
    obs = TIRAgent(tok, "hermes").observation_ids(f"<tool_response>\n{printed}\n</tool_response>")
    before, after = TOOL_TURN.split("{}")
    assert obs == (tok.encode(before, add_special_tokens=False) + encode_text(tok, printed)
                   + tok.encode(after, add_special_tokens=False))
    im_start, im_end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert obs.count(im_end) == 1 and obs.count(im_start) == 2  # the user turn's and the generation prompt's
    assert tok.decode(obs) == TOOL_TURN.format(printed)
    assert obs in [traj.response_ids[i: i + len(obs)] for i in range(len(traj.response_ids))]


@pytest.mark.parametrize("text,won,void", [("So \\boxed{34856448}.", True, False), ("I am not sure.", False, True)])
def test_a_turn_ending_at_im_end_without_a_tool_call_ends_the_episode_graded(qwen_tokenizer, text, won, void):
    tok = qwen_tokenizer
    traj, runner, engine = play(tok, [(ids_of(tok, text, end="<|im_end|>"), "eos")])
    assert runner.programs == [] and len(engine.requests) == 1
    assert traj.reward == float(won) and traj.info["void_turn"] == void and traj.info["message_closed"]
    assert "unrun_tool_call" not in traj.info


def test_the_agent_answers_an_ended_tool_call_with_run_tool_call(qwen_tokenizer):
    agent = TIRAgent(qwen_tokenizer, "hermes")
    call = "Je calcule.\n" + HERMES.format_tool_call(CODE)
    assert agent.ended_turn_action(call) == RunToolCall(call)
    assert agent.ended_turn_action(call + " \\boxed{3}") == call + " \\boxed{3}"  # an answer is graded, not run
    simple = TIRAgent(qwen_tokenizer, "simpletir")  # the one-message styles never run an ended turn
    assert simple.tool_turn is None and simple.ended_turn_action("```python\nprint(1)\n```") is None


def test_expert_tool_calls_end_at_im_end_for_sft(qwen_tokenizer):
    """SFT sequences match rollouts: the expert's tool call's turn ends with the `<|im_end|>` the policy samples;
    its answer turn does not (SFT appends the end of the episode)."""
    tok = qwen_tokenizer
    agent = TIRAgent(tok, "hermes")
    call = "Je calcule.\n" + HERMES.format_tool_call(CODE)
    assert agent.turn_ids(call) == call_turn(tok)
    assert agent.turn_ids("So \\boxed{1}.") == ids_of(tok, "So \\boxed{1}.")


# ------------------------------------------------------------- which templates give tool turns


NO_TOOL_ROLE = ("{%- for message in messages -%}"
                "{%- if message.role == 'tool' -%}{{ raise_exception('no tool role') }}{%- endif -%}"
                "{{ '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}"
                "{%- endfor -%}"
                "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
"""ChatML that refuses a `tool` message."""


def test_without_a_template_tool_turn_hermes_keeps_the_one_message_format(qwen_backend):
    tok = wrap(qwen_backend, chat_template=NO_TOOL_ROLE)
    agent = TIRAgent(tok, "hermes")
    assert agent.tool_turn is None and agent.tools is None and agent.stop_strings(0) == ["</tool_call>"]
    assert agent.messages("q")[0]["content"] == HERMES.system_prompt
    obs = "<tool_response>\n34856448\n</tool_response>"
    assert agent.observation_ids(obs) == encode_text(tok, obs)
    turn_1 = ids_of(tok, "Je calcule.\n" + HERMES.format_tool_call(CODE))  # stopped at </tool_call>
    traj, runner, engine = play(tok, [(turn_1, "stop"), (ids_of(tok, "\\boxed{34856448}", end="<|im_end|>"), "eos")])
    assert len(runner.programs) == 1 and traj.reward == 1.0
    assert traj.response_ids[len(turn_1): len(turn_1) + len(encode_text(tok, obs))] == encode_text(tok, obs)
    assert engine.requests[0].stop_strings == ["</tool_call>"]
    ended, runner, _ = play(tok, [(call_turn(tok), "eos")])  # a closed message runs no tool call
    assert runner.programs == [] and ended.info["unrun_tool_call"]


def test_the_tiny_chatml_renders_tool_turns_and_only_hermes_uses_them(tiny_tokenizer):
    """alprl's tiny tokenizer's ChatML writes a `tool` message as a turn of its own role."""
    agent = TIRAgent(tiny_tokenizer, "hermes")
    assert agent.tool_turn == ("\n<|im_start|>tool\n", "<|im_end|>\n<|im_start|>assistant\n")
    assert agent.tools is None and agent.messages("q")[0]["content"] == HERMES.system_prompt
    assert all(TIRAgent(tiny_tokenizer, s).tool_turn is None for s in ("simpletir", "torl"))


TOOLS_SECTION = (
    "{%- if tools -%}{{ '<|im_start|>system\\n' ~ messages[0].content ~ '\\n\\n# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools -%}{{ '\\n' ~ (tool | tojson) }}{%- endfor -%}{{ '\\n</tools><|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>system\\n' ~ messages[0].content ~ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- for message in messages[1:] -%}"
    "{%- if message.role == 'tool' -%}{{ '<|im_start|>user\\n<tool_response>\\n' ~ message.content ~ "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
"""A Qwen2.5-like template that lists `tools=` in a `# Tools` system section (written for this test)."""


def test_a_template_that_lists_tools_gets_the_schema_and_a_short_system_prompt(qwen_backend):
    tok = wrap(qwen_backend, chat_template=TOOLS_SECTION)
    agent = TIRAgent(tok, "hermes")
    assert agent.tools == [CODE_INTERPRETER] and agent.tool_turn is not None
    messages = agent.messages(TASK.question)
    assert messages[0]["content"] == HERMES.template_system_prompt
    prompt = agent.prompt_ids(TASK.question, {})
    assert prompt == chat_prompt_ids(tok, messages, tools=[CODE_INTERPRETER])
    assert prompt == tok.apply_chat_template(messages, tools=[CODE_INTERPRETER], add_generation_prompt=True,
                                             tokenize=True, return_dict=False)
    assert tok.decode(prompt).count(json.dumps(CODE_INTERPRETER["function"]["parameters"])) == 1  # listed once


def test_a_long_tool_output_is_cut_inside_the_turn_which_keeps_its_framing(qwen_tokenizer):
    """`rollout.max_obs_tokens` cuts the tool's output, never the control tokens that close its turn and open the
    next assistant turn (a cut framing would leave the policy writing inside the tool's turn)."""
    from dataclasses import replace

    tok = qwen_tokenizer
    code = "print(7 ** 300)"  # 254 digits, one token each
    limits = replace(LIMITS, max_obs_tokens=40)
    env = TIRMathEnv(style="hermes", max_turns=4, runner=CountingRunner())
    turn_1, turn_2 = call_turn(tok, code), ids_of(tok, "\\boxed{1}", end="<|im_end|>")
    try:
        traj = run_episodes(ScriptedEngine([(turn_1, "eos"), (turn_2, "eos")]), TIRAgent(tok, "hermes"), [env],
                            [SPEC], limits)[0]
    finally:
        env.close()
    obs = traj.response_ids[len(turn_1): len(traj.response_ids) - len(turn_2)]
    assert len(obs) == 40
    text = tok.decode(obs)
    assert text.startswith("\n<|im_start|>user\n<tool_response>\n")
    assert text.endswith("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert str(7 ** 300).startswith(text.split("<tool_response>\n")[1].split("\n</tool_response>")[0])
