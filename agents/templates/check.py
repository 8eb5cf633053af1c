"""Is a chat template append-only over a multi-turn tool conversation? And the `env.think_history` policy.

**Why it matters.** Thinking models' templates rewrite history: Qwen3's drops the `<think>` block of every assistant
turn that comes before the last user message, QwQ's and DeepSeek-R1's drop it from every earlier assistant turn. A
trainer that re-renders the conversation with the template before each turn would show the model a prompt that is
not the token stream it sampled from, and train on a prefix the model never saw. Prior art: verl's chat-template
checker script and sanity-check mode, prime-rl's per-family renderers, tinker-cookbook's `strip_thinking_from_history`.

**What alprl does.** The rollout never re-renders: the prompt is rendered once (`chat_prompt_ids`), sampled ids are
appended as sampled, and a tool result is appended as the template's tool-turn text read once from a probe rendering
(`agents.control_tokens.tool_turn_template`), so what the model saw is what is trained on, whatever the template does
to history. No code path renders the conversation again between turns.

**`env.think_history`** says what the prompt of a later turn holds of earlier thinking (`THINK_HISTORY`):
- `keep` (default): earlier `<think>` blocks stay in the stream as sampled. Holds for every template.
- `strip`: later turns see the history as the template renders it, earlier thinking dropped where the template drops
  it. With one stream per episode this holds only where the template's rendering of each later turn extends the
  stream (append-only over the agent's conversation); where it does not, the next turn would need a new sample
  (a segment with its own prompt), which alprl's trajectories do not have, so `strip` is refused there with one
  line (`strip_refusal`). In alprl's agents an episode is one question: hermes tool turns under Qwen3's template keep
  their thinking (no user message follows them), so `strip` holds and changes no token; under a template that drops
  every earlier turn's thinking it is refused. The one-message formats (simpletir, torl, household, WebShop) have
  no earlier assistant message to strip, and `strip` is refused there as meaningless.

**The check.** `check_template` plays a scripted conversation (`SCRIPT`: system, user, assistant thinking then calling
the tool, tool result, the same again, a final answer with thinking, then a follow-up question and its answer) turn
by turn through the template, as token ids (`apply_chat_template(tokenize=True)`) and as text. For each assistant turn
it renders the prompt the model would get, asks that it extend the stream so far (the previous prompt, the reply the
model wrote, and the tool turn), and appends the reply the model writes: the template's own rendering of the turn as
the last message, with its thinking put back where the template drops even that. The follow-up is past what an alprl
episode holds; it is there because Qwen3-style templates drop thinking only once a new user message arrives.
Formats: `hermes` under a template that renders `tool` messages makes each tool call an assistant turn; otherwise
(simpletir, torl, hermes without such a template) the episode is one assistant message whose prompt for a later turn is
the rendering with `continue_final_message`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from agents.control_tokens import encode_text, template_end_of_turn_id, tool_turn_template
from envs.tir.styles import STYLES, get_style
from sandbox.types import ExecutionResult

THINK_HISTORY = {
    "keep": "earlier <think> blocks stay in the token stream as sampled (any template)",
    "strip": "later turns see history as the template renders it; refused where that is not append-only",
}
"""`env.think_history` choices; the module docstring states the policy."""
FORMATS = tuple(STYLES)
"""The tool-call formats of `check_template` (the TIR styles, envs/tir/styles.py)."""
CONTEXT_TOKENS = 12
"""Tokens of decoded text shown on each side of a break."""


@dataclass(frozen=True)
class Step:
    """One assistant turn of the scripted conversation: its thinking, its text, the code it runs (None: it answers)
    and what the code prints; `follow_up`: a user message that comes right before it."""

    thinking: str
    text: str
    code: str | None = None
    result: str = ""
    follow_up: str | None = None


QUESTION = "Compute 8448 * 4126, then add 17."
SCRIPT: tuple[Step, ...] = (
    Step("I multiply first.", "Let me compute the product.", "print(8448 * 4126)", "34856448"),
    Step("Now add 17 to 34856448.", "Adding 17.", "print(34856448 + 17)", "34856465"),
    Step("Both steps are done.", "The answer is \\boxed{34856465}."),
    Step("Subtract 65 from 34856465.", "That gives \\boxed{34856400}.", follow_up="And minus 65?"),
)
EPISODE_TURNS = next(i for i, s in enumerate(SCRIPT) if s.follow_up)
"""The turns an alprl episode holds (one question); later ones follow a new user message."""


@dataclass(frozen=True)
class Break:
    """Where a rendering stops extending the stream: assistant turn `turn` (1-based), its first differing token
    `position`, the text before it and how the stream and the rendering go on from there."""

    turn: int
    position: int
    before: str
    stream: str
    rendered: str
    what: str
    """"prompt": the turn's prompt does not extend the stream; "reply": the template's rendering of the reply
    does not extend the turn's own prompt."""
    same_text: bool
    """The rendering's text does extend the stream's: only the tokens differ (a re-encoding merged across the
    boundary where the stream appended ids separately)."""


@dataclass(frozen=True)
class TemplateReport:
    """What `check_template` found: the format and its shape, each checked turn's prompt length, the first break."""

    fmt: str
    chat_turns: bool
    """Each tool call is an assistant turn of its own (hermes under a template with tool turns)."""
    prompt_lengths: list[int]
    """Tokens of each checked turn's prompt, up to the break."""
    broken: Break | None

    @property
    def append_only(self) -> bool:
        return self.broken is None

    @property
    def episode_append_only(self) -> bool:
        """Append-only over the turns an alprl episode holds (one question, `EPISODE_TURNS`)."""
        return self.broken is None or self.broken.turn > EPISODE_TURNS


def think_block(thinking: str) -> str:
    """A reply's thinking as Qwen3-style models write it."""
    return f"<think>\n{thinking}\n</think>\n\n"


def _first_difference(stream: Sequence[int], rendered: Sequence[int]) -> int | None:
    """The first position where `rendered` does not continue `stream` (None: `stream` is a prefix of it)."""
    for i, token in enumerate(stream):
        if i >= len(rendered) or rendered[i] != token:
            return i
    return None


def _break(tok: PreTrainedTokenizerBase, turn: int, stream: list[int], rendered: list[int], what: str) -> Break | None:
    i = _first_difference(stream, rendered)
    if i is None:
        return None
    w = CONTEXT_TOKENS
    return Break(turn, i, tok.decode(stream[max(0, i - w): i]), tok.decode(stream[i: i + w]),
                 tok.decode(rendered[i: i + w]), what, tok.decode(rendered).startswith(tok.decode(stream)))


class _Renderer:
    """The template applied to a conversation, as ids and as text, with the agent's `tools=`."""

    def __init__(self, tok: PreTrainedTokenizerBase, tools: list[dict] | None):
        self.tok, self.tools = tok, tools

    def __call__(self, messages: list[dict], **kwargs) -> tuple[list[int], str]:
        text = self.tok.apply_chat_template(messages, tools=self.tools, tokenize=False, **kwargs)
        ids = self.tok.apply_chat_template(messages, tools=self.tools, tokenize=True, return_dict=False, **kwargs)
        return list(ids), text


def _tool_call(code: str) -> dict:
    return {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": code}}}


def _chat_check(render: _Renderer, head: list[dict], script: Sequence[Step]) -> tuple[list[int], Break | None]:
    """hermes with tool turns: each reply is an assistant message, each result a `tool` message."""
    tok = render.tok
    eot = template_end_of_turn_id(tok)
    eot_text = tok.convert_ids_to_tokens(eot) if eot is not None else None
    messages, stream, lengths = list(head), [], []
    for turn, step in enumerate(script, 1):
        if step.follow_up:
            messages.append({"role": "user", "content": step.follow_up})
        prompt, prompt_text = render(messages, add_generation_prompt=True)
        lengths.append(len(prompt))
        if broken := _break(tok, turn, stream, prompt, "prompt"):
            return lengths, broken
        reply = {"role": "assistant", "content": think_block(step.thinking) + step.text}
        if step.code is not None:
            reply["tool_calls"] = [_tool_call(step.code)]
        full, full_text = render(messages + [reply])
        if broken := _break(tok, turn, prompt, full, "reply"):
            return lengths, broken
        written = full_text[len(prompt_text):]  # the reply as the template writes a last turn, up to its end
        written = written.split(eot_text, 1)[0] if eot_text else written
        if step.thinking not in written:  # the template drops even the last turn's thinking: the model wrote it
            written = think_block(step.thinking) + written
        stream = prompt + tok.encode(written, add_special_tokens=False) + ([eot] if eot is not None else [])
        messages.append(reply)
        if step.code is not None:
            messages.append({"role": "tool", "content": step.result})
    return lengths, None


def _message_check(render: _Renderer, head: list[dict], script: Sequence[Step],
                   style_name: str) -> tuple[list[int], Break | None]:
    """The one-message formats: turns and tool outputs concatenated in one assistant message (agents/formats/tir_agent.py);
    a later turn's prompt re-renders the message in progress (`continue_final_message`)."""
    tok, style = render.tok, get_style(style_name)
    eot = template_end_of_turn_id(tok)
    if eot is None:
        eot = tok.eos_token_id
    messages, content, lengths = list(head), "", []
    stream, _ = render(messages, add_generation_prompt=True)
    for turn, step in enumerate(script, 1):
        if step.follow_up:  # the message was closed by the previous answer
            messages += [{"role": "assistant", "content": content}, {"role": "user", "content": step.follow_up}]
            content = ""
        if content:
            try:
                prompt, _ = render(messages + [{"role": "assistant", "content": content}], continue_final_message=True)
            except ValueError:  # transformers: the template rewrote the message, so it cannot be continued
                prompt, _ = render(messages + [{"role": "assistant", "content": content}])
        else:
            prompt, _ = render(messages, add_generation_prompt=True)
        lengths.append(len(prompt))
        if broken := _break(tok, turn, stream, prompt, "prompt"):
            return lengths, broken
        text = think_block(step.thinking) + step.text
        if step.code is None:
            stream = prompt + tok.encode(text, add_special_tokens=False) + ([eot] if eot is not None else [])
            content += text
            continue
        text += "\n" + style.format_tool_call(step.code)
        observation = style.format_observation(ExecutionResult("Success", stdout=step.result + "\n"), text)
        stream = prompt + tok.encode(text, add_special_tokens=False) + encode_text(tok, observation)
        content += text + observation
    return lengths, None


def check_template(tok: PreTrainedTokenizerBase, fmt: str = "hermes", script: Sequence[Step] = SCRIPT,
                   system: str | None = None, tools: list[dict] | None = None) -> TemplateReport:
    """Play `script` through `tok`'s chat template in format `fmt` (a TIR style) and report the first break.

    system: the system prompt (default: the style's, as alprl's TIR agent sends it); tools: the `tools=` the
    template gets (the agent's, where the template lists them). Raises ValueError for an unknown format or a
    tokenizer without a chat template."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    if not getattr(tok, "chat_template", None):
        raise ValueError("the tokenizer has no chat template (tokenizer_config.json chat_template or "
                         "chat_template.jinja)")
    chat_turns = get_style(fmt).tool_schema is not None and tool_turn_template(tok) is not None
    head = [{"role": "system", "content": system if system is not None else get_style(fmt).system_prompt},
            {"role": "user", "content": QUESTION}]
    render = _Renderer(tok, tools)
    lengths, broken = (_chat_check(render, head, script) if chat_turns else
                       _message_check(render, head, script, fmt))
    return TemplateReport(fmt, chat_turns, lengths, broken)


def strip_refusal(agent) -> str | None:
    """Why `env.think_history=strip` cannot hold for a TIR agent (`agents.formats.tir_agent.TIRAgent`) on its tokenizer;
    None where it holds: hermes tool turns, under any template (a turn whose rendered prompt does not extend the
    stream starts a new trace of the episode, agents/templates/history.py; `strip_traces` says which)."""
    if agent.tool_turn is None:
        return (f"env.think_history=strip: env.style={agent.style.name} under this chat template keeps the episode "
                "in one assistant message, which has no earlier assistant turn to strip; use keep")
    return None


def strip_traces(tok: PreTrainedTokenizerBase, fmt: str = "hermes", script: Sequence[Step] = SCRIPT,
                 system: str | None = None, tools: list[dict] | None = None) -> list[int]:
    """Under `env.think_history=strip`, the trace (0-based) each assistant turn of `script` is sampled in, as the
    rollout decides it (agents/templates/history.py): the turn's prompt is the template's rendering of the conversation, each
    earlier reply as the model wrote it (its thinking included) and each result a `tool` message; a rendering whose
    text does not continue the stream's (the previous prompt, the reply, the tool turn) starts a new trace. Only for
    chat turns (hermes under a template with tool turns); raises ValueError for the one-message formats."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    tool_turn = tool_turn_template(tok) if get_style(fmt).tool_schema is not None else None
    if tool_turn is None:
        raise ValueError(f"format {fmt} under this template keeps an episode in one assistant message: "
                         "env.think_history=strip has no earlier turn to strip")
    render, eot = _Renderer(tok, tools), template_end_of_turn_id(tok)
    eot_text = tok.convert_ids_to_tokens(eot) if eot is not None else ""
    messages = [{"role": "system", "content": system if system is not None else get_style(fmt).system_prompt},
                {"role": "user", "content": QUESTION}]
    stream, trace, traces = None, 0, []
    for step in script:
        if step.follow_up:
            messages.append({"role": "user", "content": step.follow_up})
        _, prompt = render(messages, add_generation_prompt=True)
        if stream is not None and not prompt.startswith(stream):
            trace += 1
        traces.append(trace)
        reply = {"role": "assistant", "content": think_block(step.thinking) + step.text}
        if step.code is not None:
            reply["tool_calls"] = [_tool_call(step.code)]
        _, full = render(messages + [reply])
        written = full[len(prompt):].split(eot_text, 1)[0] if eot_text else full[len(prompt):]
        if step.thinking not in written:  # the template drops even the last turn's thinking: the model wrote it
            written = think_block(step.thinking) + written
        messages.append({"role": "assistant", "content": written})  # as the rollout re-renders a sampled turn
        stream = prompt + written + eot_text
        if step.code is not None:
            messages.append({"role": "tool", "content": step.result})
            stream += tool_turn[0] + step.result + tool_turn[1]
    return traces
