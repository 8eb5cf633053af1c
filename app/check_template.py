"""`alprl check-template MODEL_DIR`: is the model's chat template append-only over a multi-turn tool conversation?

The check itself is `agents.templates.check.check_template`; this module loads the tokenizer as a run would
(`agents.models.load_tokenizer`: the directory's tokenizer and chat template, offline), prints the turn-by-turn
result, and maps it to an exit status.
"""

from __future__ import annotations

import argparse
import sys

from agents.templates.check import (
    EPISODE_TURNS,
    FORMATS,
    QUESTION,
    SCRIPT,
    TemplateReport,
    check_template,
    strip_traces,
)

DESCRIPTION = f"""Render a multi-turn tool conversation turn by turn with the model's own chat template and report
whether each turn's prompt is an append-only extension of the token stream so far (the previous prompt, the reply the
model wrote, the tool result), and where it breaks: the turn, the first differing token, the text around it.

The conversation: system, user ({QUESTION!r}), an assistant turn that thinks and calls the code tool, the tool's
result, the same again, a final answer with thinking, then a follow-up question and its answer ({len(SCRIPT)}
assistant turns). Turns 1-{EPISODE_TURNS} are what an alprl episode holds (one question); the follow-up is there
because Qwen3-style templates drop earlier thinking only once a new user message arrives (QwQ- and R1-style ones drop
it at every turn).

What it means for training: with env.think_history=keep (the default) alprl's rollout never re-renders history, it
keeps one token stream per episode, so training uses exactly the tokens the model saw whatever this reports. With
env.think_history=strip (hermes only: later turns see history as the template renders it) a turn whose rendered
prompt does not extend the stream starts a new trace of the episode, sampled from that rendering; for hermes the
check lists the trace each turn would be sampled in (docs/architecture.md, "Thinking models and earlier <think>
blocks", "Episodes of traces")."""
EPILOG = """exit status: 0 append-only; 1 not append-only (the break is printed); 2 bad input (no such model
directory, no tokenizer or no chat template in it), one line on stderr."""


def add_check_template_parser(sub) -> None:
    p = sub.add_parser("check-template", help="is a model's chat template append-only over a multi-turn tool "
                       "conversation (thinking models drop earlier <think> blocks)?", description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a model directory (config.json + tokenizer files) or a "
                   "hub id in the local cache, as model.path takes it")
    p.add_argument("--format", choices=FORMATS, default="hermes", help="the tool-call format (env.style): hermes "
                   "makes each tool call an assistant turn under a template that renders `tool` messages; simpletir "
                   "and torl keep the episode in one assistant message (default hermes)")


def _break_lines(report: TemplateReport) -> list[str]:
    b = report.broken
    where = "its prompt" if b.what == "prompt" else "the template's rendering of its reply (against its own prompt)"
    lines = [f"turn {b.turn}: BREAKS: token {b.position} of {where} differs",
             f"  before it:      {b.before!r}",
             f"  the stream has: {b.stream!r}",
             f"  the template:   {b.rendered!r}"]
    if b.same_text:
        lines.append("  (the text matches: only the tokens differ, a re-encoding merges across a boundary where the "
                     "stream appended ids separately)")
    return lines


def _strip_line(traces: list[int] | None) -> str:
    """What `env.think_history=strip` makes of the conversation: the trace of each turn, which turns start one."""
    if traces is None:
        return "env.think_history=strip: refused, one assistant message has no earlier turn to strip"
    starts = [str(turn) for turn in range(2, len(traces) + 1) if traces[turn - 1] != traces[turn - 2]]
    numbers = " ".join(str(t + 1) for t in traces)
    if not starts:
        return f"env.think_history=strip: traces {numbers} (the trace of each turn; one trace: strip changes no token)"
    which = f"turn {starts[0]} starts" if len(starts) == 1 else f"turns {', '.join(starts)} start"
    return (f"env.think_history=strip: traces {numbers} (the trace of each turn; {which} a new trace, sampled from the "
            "template's rendering)")


def describe(report: TemplateReport, model_dir: str, traces: list[int] | None = None) -> str:
    """The turn-by-turn result as printed; `traces`: under strip, the trace (0-based) of each turn (chat turns)."""
    shape = ("each tool call an assistant turn, results as `tool` messages" if report.chat_turns else
             "the whole episode one assistant message, re-rendered with continue_final_message")
    lines = [f"alprl check-template: {model_dir}, format {report.fmt} ({shape})"]
    for turn, length in enumerate(report.prompt_lengths, 1):
        if report.broken is not None and turn == report.broken.turn:
            lines += _break_lines(report)
        else:
            lines.append(f"turn {turn}: prompt of {length} tokens extends the stream")
    if report.append_only:
        lines.append(f"append-only: yes, all {len(SCRIPT)} turns")
    else:
        after = " (after the follow-up question)" if report.broken.turn > EPISODE_TURNS else ""
        lines.append(f"append-only: no, breaks at turn {report.broken.turn}{after}")
    episode = "append-only" if report.episode_append_only else "not append-only"
    lines.append(f"one question (turns 1-{EPISODE_TURNS}, what an alprl episode holds): {episode}")
    lines.append(_strip_line(traces if report.chat_turns else None))
    lines.append("with env.think_history=keep alprl never re-renders between turns: training uses exactly the tokens "
                 "the model saw")
    return "\n".join(lines)


def run_check_template_command(args: argparse.Namespace) -> int:
    from jinja2 import TemplateError

    from agents.formats.tir_agent import TIRAgent
    from agents.models import load_tokenizer

    try:
        tok = load_tokenizer(args.model_dir)
        agent = TIRAgent(tok, args.format)  # the system prompt and `tools=` a run would send
        system = agent.messages(QUESTION)[0]["content"]
        report = check_template(tok, args.format, system=system, tools=agent.tools)
        traces = strip_traces(tok, args.format, system=system, tools=agent.tools) if report.chat_turns else None
    except (OSError, ValueError, TemplateError) as exc:  # FileNotFoundError included; transformers' messages run
        # to many lines; a template that raises on the conversation (e.g. it wants a tool_call_id) is bad input
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = "" if args.model_dir in first else f"{args.model_dir}: "
        print(f"alprl check-template: error: {where}{first}", file=sys.stderr)
        return 2
    print(describe(report, args.model_dir, traces))
    return 0 if report.append_only else 1
