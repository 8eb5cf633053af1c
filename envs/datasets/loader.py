"""`load_dataset`: a local math set (any layout in `layouts.py`) → a list of `MathProblem`.

The question comes back as plain text: a chat-message prompt (verl, DAPO) gives its last user message, and DAPO's
instruction wrapper ("Solve the following math problem step by step. The last line ... Answer: $Answer ...") is
removed, since the TIR env states its own answer format (`\\boxed{}`) and the two would contradict each other.
The gold answer is normalized by `answers.py`. Every structural problem with a file (a missing field, a wrong
type, an empty answer) is one `DatasetError` whose single-line message names the file, the row and the field. A
gold answer that parses as a value but not as mathematics math-verify can grade (`gradability.py`: unbalanced
braces, nesting 200 deep, an exponent tower, 5,000 digits) is kept: the problem carries the reason in
`ungradable`, its answers are compared as strings, and evaluation names the row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envs.datasets.answers import AnswerError, answer_from_solution, normalize_answer
from envs.datasets.files import DatasetError, read_rows
from envs.datasets.gradability import ungradable_reason
from envs.datasets.layouts import Layout, LayoutError, detect_layout, named_layout, with_fields

# BytedTsinghua-SIA/DAPO-Math-17k wraps every problem in this instruction (its `prompt` user message).
DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.")
DAPO_SUFFIX = 'Remember to put your answer on its own line after "Answer:".'
_MISSING = object()


@dataclass(frozen=True)
class MathProblem:
    """One problem. id: from the file's id column, else "<file stem>:<row>"; question: plain text; answer: the
    normalized gold answer (what `envs.tir.grading.grade` takes as gold); source: the row's `data_source` where the
    layout has one, else the layout name; extra: the row's other top-level columns, unchanged (the question's and
    the answer's columns are left out; a worked `solution` stays, so never show `extra` to the model); row: the
    1-based row number `DatasetError` messages use (the JSONL line number); ungradable: why math-verify cannot
    grade the answer ("" when it can: `gradability.ungradable_reason`)."""

    id: str
    question: str
    answer: str
    source: str
    extra: dict = field(default_factory=dict, compare=False)
    row: int = field(default=0, compare=False)
    ungradable: str = ""


def _get(row: dict, path: str):
    value = row
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _question_text(value) -> str:
    if isinstance(value, list):
        users = [m.get("content") for m in value if isinstance(m, dict) and m.get("role") == "user"]
        if not users:
            raise AnswerError("no user message in the chat prompt")
        value = users[-1]
    if not isinstance(value, str):
        raise AnswerError(f"expected text or chat messages, got {type(value).__name__}")
    text = value.strip()
    if text.startswith(DAPO_PREFIX) and text.endswith(DAPO_SUFFIX):
        text = text[len(DAPO_PREFIX): len(text) - len(DAPO_SUFFIX)].strip()
    if not text:
        raise AnswerError("empty question")
    return text


def _answer(value, layout: Layout) -> str:
    if layout.answer_kind == "solution":
        return answer_from_solution(value)
    return normalize_answer(value, integer=layout.answer_kind == "integer")


def _problem(path: Path, number: int, row: dict, layout: Layout) -> MathProblem:
    values = {}
    for role in ("question", "answer"):
        column = layout.fields[role]
        value = _get(row, column)
        if value is _MISSING:
            raise DatasetError(f"{path}: row {number}: field {column!r}: missing ({layout.name} layout)")
        try:
            values[role] = _question_text(value) if role == "question" else _answer(value, layout)
        except ValueError as e:  # AnswerError, and anything else a value raises: still one line naming the row
            raise DatasetError(f"{path}: row {number}: field {column!r}: {' '.join(str(e).split())}") from None
    id_value = _get(row, layout.fields["id"]) if "id" in layout.fields else _MISSING
    source = _get(row, layout.fields["source"]) if "source" in layout.fields else _MISSING
    used = {layout.fields[role].split(".")[0] for role in ("question", "answer")}
    used |= {layout.fields[role] for role in ("id", "source") if role in layout.fields}  # a nested id keeps its dict
    return MathProblem(
        id=f"{path.stem}:{number}" if id_value in (_MISSING, None, "") else str(id_value),
        question=values["question"], answer=values["answer"],
        source=layout.name if source in (_MISSING, None, "") else str(source),
        extra={k: v for k, v in row.items() if k not in used},
        row=number, ungradable=ungradable_reason(values["answer"]))


def resolve_layout(path: Path, columns: set[str], format: str | None, fields: dict[str, str] | None) -> Layout:
    """The layout for a file: named by `format`, else detected, then with `fields` overrides applied."""
    try:
        if format is not None:
            layout = named_layout(format, columns)
        elif fields and {"question", "answer"} <= set(fields):
            layout = Layout("custom", {}, frozenset())  # fully mapped: nothing to detect
        else:
            layout = detect_layout(columns)
        return with_fields(layout, fields) if fields else layout
    except LayoutError as e:
        raise DatasetError(f"{path}: {e}") from None


def load_dataset(path: str | Path, format: str | None = None, fields: dict[str, str] | None = None,
                 split_field: str | None = None, split: str | tuple[str, ...] | None = None) -> list[MathProblem]:
    """Load a local JSONL / JSON / parquet math set as a list of MathProblem.

    format: a layout name (`layouts.LAYOUT_NAMES`, any case); None detects it from the first row's columns (after
        the split filter).
    fields: role → column overrides, e.g. {"question": "my_q", "answer": "my_a"} (roles: question, answer, id,
        source; a dotted path reads a nested key).
    split_field, split: keep only rows whose `split_field` value equals `split`, or one of them if `split` is a
        tuple (compared as strings; a tuple lets "valid" and "validation" both name a validation split).
    """
    path = Path(path)
    rows = read_rows(path)
    if (split_field is None) != (split is None):
        raise DatasetError(f"{path}: split_field and split go together (got split_field={split_field!r}, "
                           f"split={split!r})")
    if split_field is not None:
        rows = _filter_split(path, rows, split_field, split)
    layout = resolve_layout(path, set(rows[0][1]), format, fields)
    return [_problem(path, number, row, layout) for number, row in rows]


def _filter_split(path: Path, rows: list[tuple[int, dict]], split_field: str, split: str | tuple[str, ...]):
    wanted = {str(s) for s in split} if isinstance(split, tuple) else {str(split)}
    seen: set[str] = set()
    kept = []
    for number, row in rows:
        value = _get(row, split_field)
        if value is _MISSING:
            raise DatasetError(f"{path}: row {number}: field {split_field!r}: missing (the split field)")
        seen.add(str(value))
        if str(value) in wanted:
            kept.append((number, row))
    if not kept:
        wanted_text = f"== {split!r}" if not isinstance(split, tuple) else f"in {split!r}"
        raise DatasetError(f"{path}: no rows with {split_field} {wanted_text} (values seen: "
                           f"{', '.join(sorted(seen)[:20])})")
    return kept
