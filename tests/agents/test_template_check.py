"""`agents.templates.check.check_template` and `alprl check-template` on the real Qwen vocabulary (tests/qwen_vocab.py):
Qwen2.5's template is append-only over tool turns; a Qwen3-style one (tests/agents/fixtures/qwen3_style.jinja) breaks
at the turn after the follow-up question, one that drops every earlier turn's thinking (strip_all_thinking.jinja) at
turn 2; the break names the turn, the first differing token and the text on both sides."""

from __future__ import annotations

import pytest
from thinking_templates import TEMPLATES, model_dir, thinking_tokenizer

from agents.models import train_tokenizer
from agents.templates.check import EPISODE_TURNS, SCRIPT, check_template
from app.cli import main


@pytest.fixture(scope="module")
def thinking(qwen_backend):
    """The fixture templates on Qwen3's tokenizer layout, by name (each build copies the 151k-merge backend)."""
    return {name: thinking_tokenizer(qwen_backend, name) for name in TEMPLATES}


@pytest.fixture(scope="module")
def no_template():
    tok = train_tokenizer(["x"], vocab_size=300)
    tok.chat_template = None
    return tok


def test_qwen25_and_the_tiny_chatml_are_append_only_over_tool_turns(qwen_tokenizer, tiny_tokenizer):
    for tok in (qwen_tokenizer, tiny_tokenizer):
        report = check_template(tok, "hermes")
        assert report.chat_turns and report.append_only and report.episode_append_only
        assert len(report.prompt_lengths) == len(SCRIPT) == 4
        assert report.prompt_lengths == sorted(set(report.prompt_lengths))  # each prompt longer than the last


@pytest.mark.parametrize("name,turn", [("qwen3_style", 4), ("strip_all_thinking", 2)])
def test_a_template_that_drops_earlier_thinking_breaks_at_the_turn_that_drops_it(thinking, name, turn):
    """Qwen3-style: turns 1-3 follow the one user message, so their thinking stays until the follow-up question of
    turn 4; strip-all: turn 1's thinking is gone from turn 2's prompt. Either way the first differing token is the
    first of turn 1's reply, right after turn 1's generation prompt: the stream has its `<think>` there, the template
    goes straight to its text."""
    report = check_template(thinking[name], "hermes")
    b = report.broken
    assert (b.turn, b.what) == (turn, "prompt") and len(report.prompt_lengths) == turn
    assert b.position == report.prompt_lengths[0]
    assert b.before.endswith(", then add 17.<|im_end|>\n<|im_start|>assistant\n")
    assert b.stream.startswith("<think>\nI multiply first.\n</think>\n\nLet me compute")
    assert b.rendered.startswith("Let me compute the product.\n<tool_call>\n")
    assert not b.same_text
    assert report.episode_append_only == (turn > EPISODE_TURNS)


def test_re_rendering_one_message_re_encodes_across_the_observation_boundary(qwen_tokenizer):
    """simpletir's turn ends with its stop string "\\n```\\n" and its observation starts with "\\n": the stream holds
    the two encoded apart, a re-rendering encodes "```\\n\\n" at once, into other tokens. torl's turn ends at
    "```output" and its observation starts "\\n": no merge there."""
    tok = qwen_tokenizer
    assert tok.encode("```\n\n") != tok.encode("```\n") + tok.encode("\n")  # the cause
    simpletir = check_template(tok, "simpletir")
    b = simpletir.broken
    assert not simpletir.chat_turns and (b.turn, b.what) == (2, "prompt") and b.same_text
    assert b.rendered.startswith(b.stream) and "```\n\nCode execution result: " in b.before + b.stream
    assert check_template(tok, "torl").append_only


def test_bad_input_raises_one_line(qwen_tokenizer, no_template):
    with pytest.raises(ValueError, match="unknown format 'json'; valid: simpletir, torl, hermes"):
        check_template(qwen_tokenizer, "json")
    with pytest.raises(ValueError, match="no chat template"):
        check_template(no_template, "hermes")


# ------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, qwen_tokenizer, thinking, no_template):
    root = tmp_path_factory.mktemp("templates")
    out = {"qwen25": model_dir(qwen_tokenizer, root / "qwen25"), "no_template": model_dir(no_template, root / "none")}
    return out | {name: model_dir(tok, root / name) for name, tok in thinking.items()}


@pytest.mark.parametrize("name,status,lines", [
    ("qwen25", 0, ["turn 4: prompt of", "append-only: yes, all 4 turns",
                   "(turns 1-3, what an alprl episode holds): append-only\n",
                   "env.think_history=strip: traces 1 1 1 1 (the trace of each turn; one trace: strip changes no"]),
    ("qwen3_style", 1, ["turn 3: prompt of", "turn 4: BREAKS: token", "the stream has: '<think>\\nI multiply",
                        "append-only: no, breaks at turn 4 (after the follow-up question)",
                        "(turns 1-3, what an alprl episode holds): append-only\n",
                        "env.think_history=strip: traces 1 1 1 2 (the trace of each turn; turn 4 starts a new trace"]),
    ("strip_all_thinking", 1, ["turn 1: prompt of", "turn 2: BREAKS: token", "append-only: no, breaks at turn 2\n",
                               "episode holds): not append-only\n",
                               "env.think_history=strip: traces 1 2 3 4 (the trace of each turn; turns 2, 3, 4 start "
                               "a new trace, sampled from the template's rendering)"]),
])
def test_check_template_prints_the_turns_and_exits_0_or_1(dirs, capsys, name, status, lines):
    assert main(["check-template", str(dirs[name])]) == status
    out = capsys.readouterr().out
    assert all(line in out for line in lines), out
    assert out.count("BREAKS") == (status == 1)  # the first break only: later turns are not rendered


def test_check_template_exits_2_with_one_line_on_bad_input(dirs, tmp_path, capsys):
    for argv, words in [([str(tmp_path / "nowhere")], "not found"), ([str(dirs["no_template"])], "no chat template")]:
        assert main(["check-template", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("alprl check-template: error: ")
        assert captured.err.count("\n") == 1 and words in captured.err
    with pytest.raises(SystemExit) as exc:  # argparse: an unknown format
        main(["check-template", str(dirs["qwen25"]), "--format", "json"])
    assert exc.value.code == 2 and "invalid choice: 'json'" in capsys.readouterr().err


def test_check_template_help_says_what_it_checks_and_its_exit_status(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check-template", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "append-only" in out and "exit status: 0 append-only; 1 not append-only" in out
    assert "--format {simpletir,torl,hermes}" in out and "env.think_history=keep" in out
