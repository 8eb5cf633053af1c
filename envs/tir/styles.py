"""TIR conventions (reference/environments.md §1 table): how a turn's code is found, run and answered.

| style | tool call in the turn (ends at the stop string) | observation | truncation | errors |
|---|---|---|---|---|
| simpletir | first ```` ```python\\n...\\n``` ```` block; text after it is dropped | `\\nCode execution result: {out}\\n` | > 512 chars: 256 + notice + 256 | any stderr: its last line |
| torl | ```` ```python ... ``` ```` then ```` ```output ````; the LAST python block runs | `\\n{out}\\n```\\n` | >= 256: 128 + `...` + 128 | last stderr line; empty: fixed message |
| hermes | `<tool_call>{"name": "code_interpreter", "arguments": {"code": ...}}</tool_call>`; under a chat template: the turn ends at its end-of-turn token instead | `<tool_response>\\n{out}\\n</tool_response>`; under a chat template: its tool turn (below) | > 256: 128 + `...(truncated)...` + 128 | stdout + stderr; not finished: `no stdout here` |

Sources: ltzheng/SimpleTIR `recipe/simpletir/agent_utils.py`; GAIR-NLP/ToRL (stop ```` ```output ````, 3 tool calls);
volcengine/verl `recipe/retool/` and its sandbox-fusion tool ("no stdout here"). Departures, all documented:
- all styles: trailing newlines of the tool output are stripped (print's "\n" would double the separator).
- simpletir: an empty result still shows `Code execution result: ` (SimpleTIR sends an empty observation, which
  leaves the model without a cue); a timeout or a crash without stderr gets a one-line message instead.
- torl: if the turn does not end with the ```` ```output ```` stop string (an engine that strips stop strings), the
  observation starts with it, so the transcript stays well formed.
- all styles: actions must include the stop string (`include_stop_str_in_output`); a `\\boxed{` outside code ends
  the episode (that turn's code is not run).

hermes under a chat template that renders a `tool` message (Qwen2.5's, Qwen3's, alprl's tiny ChatML;
`agents.control_tokens.tool_turn_template`, used by agents/formats/tir_agent.py) follows the template, as Qwen's own tool
calls and verl's tool agent loop do: no stop string; the turn ends at the template's end-of-turn token, sampled by
the policy; a turn that ended there holding a tool call runs it, and the result (`tool_message`: the output
without the `<tool_response>` tags, which the template writes) comes back as the template's own tool turn, masked;
Qwen2.5's: `\\n<|im_start|>user\\n<tool_response>\\n{out}\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n`.
When the template renders `tools=` (Qwen2.5's `# Tools` system section) it gets `tool_schema` and the system prompt
is `template_system_prompt`; otherwise `system_prompt` lists the tool itself. Without such a template (none, or one
that refuses a `tool` message) the episode stays one assistant message: the turn stops at `</tool_call>` and the
observation follows in the same message.
"""

from __future__ import annotations

import ast
import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from envs.tir.grading import extract_boxed, has_boxed
from sandbox.types import ExecutionResult

SINGLE_TURN_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
TIMEOUT_MESSAGE = "TimeoutError: the code did not finish within the time limit"


@dataclass(frozen=True)
class ParsedTurn:
    """What one assistant turn asks for. `answered`: a `\\boxed{` outside code; `answer`: its content (None if
    the box is incomplete); `code`: the code to run (None if the turn has no tool call)."""

    answered: bool
    answer: str | None
    code: str | None


def truncate_middle(text: str, limit: int, keep: int, marker: str) -> str:
    """`text` if len(text) <= limit, else its first and last `keep` characters around `marker`."""
    if len(text) <= limit:
        return text
    return text[:keep] + marker + text[-keep:]


def last_line(text: str) -> str:
    """Last non-empty line (Python tracebacks end with `ExceptionType: message`)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def error_line(result: ExecutionResult) -> str | None:
    """One-line error of a run, or None when it succeeded without stderr."""
    if result.status == "TimeLimitExceeded":
        return TIMEOUT_MESSAGE
    if result.status == "SandboxError":
        return "SandboxError: " + (last_line(result.stderr) or "the sandbox could not run the code")
    if result.stderr.strip():
        return last_line(result.stderr)
    if result.status == "Failed":
        return f"Error: the process exited with code {result.return_code}"
    return None


class Style(ABC):
    """Base of the three conventions; subclasses set the class attributes and implement the abstract methods."""

    name = ""
    stop_strings: tuple[str, ...] = ()
    """What the engine stops generation on (the stop string stays in the action text)."""
    system_prompt = ""
    max_turns_train = 5
    max_turns_eval = 10
    max_tool_calls: int | None = None
    """Tool calls per episode (None: only `max_turns` limits); the turn after the last call runs without stop."""
    tool_schema: dict | None = None
    """A function-calling style's tool (OpenAI function schema): under a chat template that renders `tool`
    messages, a call ends the assistant turn and its result is the template's tool turn (module docstring)."""
    template_system_prompt = ""
    """The system prompt when the chat template itself lists `tool_schema` (passed as `tools=`)."""

    def stop_for(self, num_tool_calls: int) -> tuple[str, ...]:
        """Stop strings for the next turn, given the tool calls made so far."""
        if self.max_tool_calls is not None and num_tool_calls >= self.max_tool_calls:
            return ()
        return self.stop_strings

    @abstractmethod
    def parse_turn(self, text: str) -> ParsedTurn:
        """What the turn asks for: an answer, a tool call, or neither (void)."""

    def prepare_code(self, code: str) -> str:
        """The program actually run for `code` (helpers prepended, last expression printed, ...)."""
        return code

    @abstractmethod
    def format_observation(self, result: ExecutionResult, turn_text: str) -> str:
        """The observation text the agent appends after a tool call."""

    def stdout_answer(self, result: ExecutionResult) -> tuple[bool, str | None]:
        """(answered, answer) when the tool output itself ends the episode (simpletir's `final_answer`)."""
        return False, None

    def tool_message(self, observation: str) -> str:
        """The content of the `tool` message that carries `observation` under a chat template."""
        return observation

    @abstractmethod
    def format_tool_call(self, code: str) -> str:
        """The tool-call text for `code`, ending exactly at the stop string (used by the expert)."""

    def _answer(self, outside_code: str, code: str | None) -> ParsedTurn:
        if has_boxed(outside_code):
            return ParsedTurn(True, extract_boxed(outside_code), code)
        return ParsedTurn(False, None, code)


_SIMPLETIR_OPEN = re.compile(r"```(?:py|python)?\n")
_FINAL_ANSWER_HELPER = 'def final_answer(result):\n    print(f"\\\\boxed{{{result}}}")\n\n'


class SimpleTIRStyle(Style):
    name = "simpletir"
    stop_strings = ("\n```\n",)
    system_prompt = (
        "Solve the math problem. You can run Python: write one code block\n```python\n<code>\n```\n"
        "and stop. Its printed output comes back as \"Code execution result: ...\". "
        "Give the final answer as \\boxed{answer}."
    )
    max_turns_train, max_turns_eval = 5, 10

    def parse_turn(self, text: str) -> ParsedTurn:
        # Same match as SimpleTIR's regex ```(?:py|python)?\n(.*?)\n``` but linear: once the first opening
        # fence has no closing fence after it, no later opening can have one either.
        opening = _SIMPLETIR_OPEN.search(text)
        if opening is not None:
            close = text.find("\n```", opening.end())
            if close != -1:
                code = text[opening.end():close].strip()
                return self._answer(text[: opening.start()], code)  # the tail after the block is dropped
        return self._answer(text, None)

    def prepare_code(self, code: str) -> str:
        return _FINAL_ANSWER_HELPER + code

    def format_observation(self, result: ExecutionResult, turn_text: str) -> str:
        err = error_line(result)
        out = err if err is not None else result.stdout.rstrip("\n")
        notice = "\n...(output truncated to stay below 512 characters)...\n"
        return f"\nCode execution result: {truncate_middle(out, 512, 256, notice)}\n"

    def stdout_answer(self, result: ExecutionResult) -> tuple[bool, str | None]:
        if "\\boxed{" in result.stdout:
            return True, extract_boxed(result.stdout)
        return False, None

    def format_tool_call(self, code: str) -> str:
        return f"```python\n{code}\n```\n"


def _python_blocks(text: str) -> list[tuple[int, int, str]]:
    """(start, end, code) of every closed ```` ```python ```` block, left to right, in linear time."""
    blocks = []
    pos = 0
    while True:
        start = text.find("```python\n", pos)
        if start == -1:
            return blocks
        body = start + len("```python\n")
        close = text.find("```", body)
        if close == -1:
            return blocks
        blocks.append((start, close + 3, text[body:close]))
        pos = close + 3


class ToRLStyle(Style):
    name = "torl"
    stop_strings = ("```output",)
    system_prompt = ("Please integrate natural language reasoning with programs to solve the problem above, "
                     "and put your final answer within \\boxed{}.")
    max_turns_train, max_turns_eval = 4, 4
    max_tool_calls = 3

    def parse_turn(self, text: str) -> ParsedTurn:
        blocks = _python_blocks(text)
        if not blocks:
            return self._answer(text, None)
        outside = "".join(text[a:b] for a, b in zip([0] + [e for _, e, _ in blocks],
                                                    [s for s, _, _ in blocks] + [len(text)], strict=True))
        return self._answer(outside, blocks[-1][2].strip())

    def format_observation(self, result: ExecutionResult, turn_text: str) -> str:
        err = error_line(result)
        out = err if err is not None else result.stdout.rstrip("\n")
        out = truncate_middle(out, 255, 128, "...") if out else TIMEOUT_MESSAGE
        prefix = "" if turn_text.rstrip().endswith("```output") else "```output"
        return f"{prefix}\n{out}\n```\n"

    def format_tool_call(self, code: str) -> str:
        return f"```python\n{code}\n```\n```output"


def _print_last_expression(code: str) -> str:
    """Wrap a bare last expression statement in print(...), as verl's ReTool tool does (via ast, not lines)."""
    if "\r" in code:
        return code  # Python counts \r as a line break; keep line bookkeeping simple and leave such code alone
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code  # let the sandbox report the error
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    call = last.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
        return code
    if last.lineno != last.end_lineno or last.col_offset != 0:
        return code  # a multi-line expression or one sharing its line with other code: leave it alone
    lines = code.split("\n")
    raw = lines[last.lineno - 1].encode()  # ast offsets count UTF-8 bytes, not characters
    expr, rest = raw[: last.end_col_offset].decode(), raw[last.end_col_offset:].decode()
    lines[last.lineno - 1] = f"print({expr}){rest}"
    return "\n".join(lines)


CODE_INTERPRETER = {"type": "function", "function": {
    "name": "code_interpreter", "description": "Run Python code and return its output.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}
_RESPONSE_OPEN, _RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"


class HermesStyle(Style):
    name = "hermes"
    stop_strings = ("</tool_call>",)
    tool_schema = CODE_INTERPRETER
    system_prompt = (
        "You can call one tool:\n<tools>\n" + json.dumps(CODE_INTERPRETER) + "\n</tools>\n"
        'Call it as <tool_call>\n{"name": "code_interpreter", "arguments": {"code": "..."}}\n</tool_call> and '
        "the result comes back in <tool_response></tool_response>. Put your final answer within \\boxed{}."
    )
    template_system_prompt = ("Solve the math problem. You can run Python code with the code_interpreter tool; what "
                              "it prints comes back as the tool's response. Put your final answer within \\boxed{}.")
    max_turns_train, max_turns_eval = 5, 16

    def parse_turn(self, text: str) -> ParsedTurn:
        start = text.find("<tool_call>")
        end = text.find("</tool_call>", start) if start != -1 else -1
        if start == -1 or end == -1:
            return self._answer(text, None)
        outside = text[:start] + text[end + len("</tool_call>"):]
        return self._answer(outside, _tool_call_code(text[start + len("<tool_call>"): end]))

    def prepare_code(self, code: str) -> str:
        return _print_last_expression(code)

    def format_observation(self, result: ExecutionResult, turn_text: str) -> str:
        if result.status in ("Success", "Failed"):  # SandboxFusion's "Finished": the process ran to its end
            out = (result.stdout + result.stderr).rstrip("\n")
        else:
            out = "no stdout here"
        out = truncate_middle(out, 256, 128, "...(truncated)...")
        return f"{_RESPONSE_OPEN}{out}{_RESPONSE_CLOSE}"

    def tool_message(self, observation: str) -> str:
        """The output inside `<tool_response>`: templates that render `tool` messages write the tags themselves."""
        if observation.startswith(_RESPONSE_OPEN) and observation.endswith(_RESPONSE_CLOSE) and \
                len(observation) >= len(_RESPONSE_OPEN) + len(_RESPONSE_CLOSE):
            return observation[len(_RESPONSE_OPEN): -len(_RESPONSE_CLOSE)]
        return observation

    def format_tool_call(self, code: str) -> str:
        call = json.dumps({"name": "code_interpreter", "arguments": {"code": code}})
        return f"<tool_call>\n{call}\n</tool_call>"


def _tool_call_code(payload: str) -> str | None:
    """The code of a `code_interpreter` call (arguments as an object or as a JSON string), or None."""
    try:
        call = json.loads(payload)
        args = call.get("arguments", {}) if isinstance(call, dict) else None
        if isinstance(args, str):
            args = json.loads(args)
    except (ValueError, RecursionError):
        return None
    if not isinstance(call, dict) or call.get("name", "code_interpreter") != "code_interpreter":
        return None
    code = args.get("code") if isinstance(args, dict) else None
    return code if isinstance(code, str) else None


STYLES: dict[str, Style] = {s.name: s for s in (SimpleTIRStyle(), ToRLStyle(), HermesStyle())}


def get_style(name: str) -> Style:
    """The style called `name`; an unknown name raises ValueError listing the valid ones."""
    if name not in STYLES:
        raise ValueError(f"unknown TIR style {name!r}; valid styles: {', '.join(STYLES)}")
    return STYLES[name]
