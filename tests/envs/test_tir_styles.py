"""TIR styles: code extraction, observation format, truncation and error lines (environments.md §1 table)."""

from __future__ import annotations

import json

import pytest

from envs.tir.styles import STYLES, TIMEOUT_MESSAGE, get_style, truncate_middle
from sandbox.execution.in_process import LocalExecutor
from sandbox.types import ExecutionResult

SIMPLE, TORL, HERMES = STYLES["simpletir"], STYLES["torl"], STYLES["hermes"]


def ok(stdout: str) -> ExecutionResult:
    return ExecutionResult("Success", stdout=stdout, return_code=0)


TRACEBACK = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nNameError: name 'y' is not defined\n"
FAILED = ExecutionResult("Failed", stdout="partial\n", stderr=TRACEBACK, return_code=1)
TIMEOUT = ExecutionResult("TimeLimitExceeded", stdout="", stderr="", return_code=-9)
KILLED = ExecutionResult("Failed", stdout="", stderr="", return_code=-9)
SANDBOX_DOWN = ExecutionResult("SandboxError", stderr="ConnectError: connection refused")


def test_unknown_style_lists_valid_ones():
    with pytest.raises(ValueError, match="valid styles: simpletir, torl, hermes"):
        get_style("react")


# ------------------------------------------------------------------ simpletir

@pytest.mark.parametrize("text,code", [
    ("Let me compute.\n```python\nprint(2 + 2)\n```\n", "print(2 + 2)"),
    ("```py\nx = 1\nprint(x)\n```\nignored tail ```python\nprint(9)\n```\n", "x = 1\nprint(x)"),
    ("```\n  print(3)  \n```\n", "print(3)"),                   # bare fence, code stripped
    ("a\n```python\nprint(1)\n```\nThe answer is \\boxed{1}", "print(1)"),  # boxed in the dropped tail
])
def test_simpletir_runs_the_first_block_and_drops_the_tail(text, code):
    parsed = SIMPLE.parse_turn(text)
    assert (parsed.answered, parsed.code) == (False, code)


def test_simpletir_box_before_the_block_answers_and_unclosed_block_is_no_code():
    parsed = SIMPLE.parse_turn("So \\boxed{12}.\n```python\nprint(12)\n```\n")
    assert parsed.answered and parsed.answer == "12"
    assert SIMPLE.parse_turn("```python\nprint(1)").code is None
    assert SIMPLE.parse_turn("```pythonx\nprint(1)\n```\n").code is None


def test_simpletir_observation_format_truncation_and_errors():
    assert SIMPLE.format_observation(ok("42\n"), "") == "\nCode execution result: 42\n"
    assert SIMPLE.format_observation(ok(""), "") == "\nCode execution result: \n"
    exact = "7" * 512
    assert SIMPLE.format_observation(ok(exact), "") == f"\nCode execution result: {exact}\n"
    long = "a" * 300 + "b" * 300
    obs = SIMPLE.format_observation(ok(long), "")
    body = obs.removeprefix("\nCode execution result: ").removesuffix("\n")
    head, notice, tail = body[:256], body[256:-256], body[-256:]
    assert head == "a" * 256 and tail == "b" * 256 and notice.count("\n") == 2 and "truncated" in notice
    # any stderr replaces stdout by its last line
    assert SIMPLE.format_observation(FAILED, "") == "\nCode execution result: NameError: name 'y' is not defined\n"
    warn = ExecutionResult("Success", stdout="5\n", stderr="SyntaxWarning: invalid escape\n", return_code=0)
    assert SIMPLE.format_observation(warn, "") == "\nCode execution result: SyntaxWarning: invalid escape\n"
    assert SIMPLE.format_observation(TIMEOUT, "") == f"\nCode execution result: {TIMEOUT_MESSAGE}\n"
    assert "exited with code -9" in SIMPLE.format_observation(KILLED, "")
    assert "SandboxError: ConnectError" in SIMPLE.format_observation(SANDBOX_DOWN, "")


def test_simpletir_final_answer_helper_really_prints_a_box():
    result = LocalExecutor().run(SIMPLE.prepare_code("x = 6 * 7\nfinal_answer(x)"))
    assert result.stdout == "\\boxed{42}\n"
    assert SIMPLE.stdout_answer(result) == (True, "42")
    assert SIMPLE.stdout_answer(ok("42\n")) == (False, None)


def test_real_traceback_becomes_its_last_line():
    result = LocalExecutor().run("print(1)\nprint(1 / 0)")
    assert SIMPLE.format_observation(result, "") == "\nCode execution result: ZeroDivisionError: division by zero\n"


# ------------------------------------------------------------------ torl

def test_torl_runs_the_last_python_block_and_sees_boxes_outside_code():
    text = "```python\nprint(1)\n```\n```output\n1\n```\nNow:\n```python\nprint(2)\n```\n```output"
    assert TORL.parse_turn(text).code == "print(2)"
    final = "```python\nprint(3)\n```\n```output\n3\n```\nThe answer is \\boxed{3}."
    assert TORL.parse_turn(final).answered and TORL.parse_turn(final).answer == "3"
    in_code = "```python\nprint('\\\\boxed{3}')\n```\n```output"
    assert not TORL.parse_turn(in_code).answered


def test_torl_observation_truncation_and_empty_output():
    turn = "```python\nprint(1)\n```\n```output"
    assert TORL.format_observation(ok("1\n"), turn) == "\n1\n```\n"
    assert TORL.format_observation(ok("1\n"), "```python\nprint(1)\n```\n") == "```output\n1\n```\n"
    kept = "x" * 255
    assert TORL.format_observation(ok(kept), turn) == f"\n{kept}\n```\n"
    cut = TORL.format_observation(ok("a" * 128 + "m" * 10 + "b" * 128), turn)
    assert cut == "\n" + "a" * 128 + "..." + "b" * 128 + "\n```\n"
    assert TORL.format_observation(ok(""), turn) == f"\n{TIMEOUT_MESSAGE}\n```\n"
    assert TORL.format_observation(FAILED, turn) == "\nNameError: name 'y' is not defined\n```\n"


def test_torl_budget_removes_the_stop_string_for_the_last_round():
    assert TORL.stop_for(2) == ("```output",) and TORL.stop_for(3) == ()
    assert SIMPLE.stop_for(100) == SIMPLE.stop_strings


# ------------------------------------------------------------------ hermes

def call(payload) -> str:
    return f"I will run it.\n<tool_call>\n{payload}\n</tool_call>"


@pytest.mark.parametrize("text,code", [
    (call(json.dumps({"name": "code_interpreter", "arguments": {"code": "print(5)"}})), "print(5)"),
    (call(json.dumps({"name": "code_interpreter", "arguments": json.dumps({"code": "1 + 1"})})), "1 + 1"),
    (call("{not json"), None),
    (call(json.dumps({"name": "web_search", "arguments": {"code": "x"}})), None),
    (call(json.dumps(["code_interpreter"])), None),
    ("<tool_call>\n{\"name\": \"code_interpreter\", \"arguments\": {\"code\": \"1\"}}", None),  # not closed
    (call("[" * 100_000 + "]" * 100_000), None),                                           # deep nesting
])
def test_hermes_tool_call_parsing(text, code):
    assert HERMES.parse_turn(text).code == code


@pytest.mark.parametrize("code,prepared", [
    ("x = 2\nx * 3", "x = 2\nprint(x * 3)"),
    ("x = 'é'\nx + 'ü'  # comment", "x = 'é'\nprint(x + 'ü')  # comment"),
    ("print(1)", "print(1)"),
    ("for i in range(2):\n    i", "for i in range(2):\n    i"),
    ("a = 1; a", "a = 1; a"),
    ("x = (1 +\n     2)\n(x\n + 1)", "x = (1 +\n     2)\n(x\n + 1)"),
    ("def f(:\n", "def f(:\n"),
])
def test_hermes_wraps_a_bare_last_expression_in_print(code, prepared):
    assert HERMES.prepare_code(code) == prepared


def test_hermes_observation():
    assert HERMES.format_observation(ok("6\n"), "") == "<tool_response>\n6\n</tool_response>"
    assert HERMES.format_observation(FAILED, "") == f"<tool_response>\npartial\n{TRACEBACK.rstrip()}\n</tool_response>"
    assert HERMES.format_observation(TIMEOUT, "") == "<tool_response>\nno stdout here\n</tool_response>"
    assert HERMES.format_observation(SANDBOX_DOWN, "") == "<tool_response>\nno stdout here\n</tool_response>"
    cut = HERMES.format_observation(ok("a" * 200 + "b" * 200), "")
    assert cut == "<tool_response>\n" + "a" * 128 + "...(truncated)..." + "b" * 128 + "\n</tool_response>"
    assert HERMES.format_observation(ok("c" * 256), "") == "<tool_response>\n" + "c" * 256 + "\n</tool_response>"


# ------------------------------------------------------------------ all styles

@pytest.mark.parametrize("name", list(STYLES))
def test_tool_calls_end_at_a_stop_string_and_parse_back(name):
    style = STYLES[name]
    code = "x = 3\nprint(x ** 2)"
    text = "Let me compute.\n" + style.format_tool_call(code)
    assert any(text.endswith(stop) for stop in style.stop_strings)
    parsed = style.parse_turn(text)
    assert (parsed.answered, parsed.code) == (False, code)
    assert "\\boxed{" in style.system_prompt


def test_truncate_middle():
    assert truncate_middle("abcdef", 6, 2, "..") == "abcdef"
    assert truncate_middle("abcdefg", 6, 2, "..") == "ab..fg"
